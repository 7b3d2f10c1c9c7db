"""Metric writers: progress.csv, TensorBoard, the live progress line."""

from pytorchrl.logging.writers import REQUIRED_COLUMNS, CSVWriter, ProgressLine, TensorBoardWriter

__all__ = ["REQUIRED_COLUMNS", "CSVWriter", "ProgressLine", "TensorBoardWriter"]
