.PHONY: install test test-fast format lint type bench
install:
	pip install torch==2.13.0 && pip install -e ".[test]"
test:
	pytest
test-fast:
	pytest -m "not slow and not learning and not cluster"
format:
	ruff format pytorchrl tests benchmarks scripts && ruff check --fix pytorchrl tests benchmarks scripts
lint:
	ruff check pytorchrl tests benchmarks scripts
type:
	mypy
bench:
	pytorchrl benchmark ppo_cartpole collection
