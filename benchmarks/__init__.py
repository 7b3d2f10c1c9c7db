"""The benchmarks of BENCHMARKS.md, the config fuzzer and their instrumented envs.

They run from a source checkout, not from an installed wheel (which does not carry this
package): ``pytorchrl benchmark NAME`` (:mod:`benchmarks.suite` lists them all),
``python -m benchmarks.fuzz``, and ``env.env_id=benchmarks.envs:crashing_cartpole``
(:mod:`benchmarks.envs`). ``results.yaml`` is the manifest of the recorded learning runs
(``scripts/results_table.py``).
"""
