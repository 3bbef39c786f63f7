# The two commands a user needs on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-long test-faults test-strict test-upstream lint docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m langgraph_resilience.cli demo

# The test files shared out to TEST_WORKERS processes (pytest-xdist), a file's tests
# in one process (--dist loadfile: its module fixtures, one Postgres database, the
# notebooks' one kernel run, set up once). TEST_WORKERS=0 runs them in this process.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadfile

test: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL)

# Crash and chaos suites with many more cases than the default, and every test on
# Postgres in pipeline mode and on a connection pool too.
test-long: $(STAMP) test-faults
	LGR_CRASH_CASES=50 LGR_CHAOS_RUNS=500 LGR_ALL_SAVERS=1 $(BIN)/pytest -q

# The fault-injection trials (tests marked `faults`: a private Postgres SIGKILLed,
# stopped and partitioned under Workers, ...) at the issue's counts: each trial
# reads LGR_FAULT_RUNS for its runs; `make test` runs them with a bounded count.
test-faults: $(STAMP)
	LGR_FAULT_RUNS=100 $(BIN)/pytest -q -m faults

# The behaviour suite's core files with LangGraph's strict msgpack mode on
# (LANGGRAPH_STRICT_MSGPACK=true: compile() then keeps a copy of the saver, see
# tests/test_strict_msgpack.py): savers, graph, worker, effects, console, command, guides.
STRICT_TESTS := tests/test_savers.py tests/test_graph.py tests/test_worker.py \
	tests/test_effects.py tests/test_console.py tests/test_cli.py tests/test_readme.py \
	tests/test_strict_msgpack.py
# Left out: three effect tests whose side effects return a class of the test's own
# (Receipt); strict msgpack blocks a type no state schema names, so the replayed
# outcome is a dict, as LangGraph's strict mode decodes it (allow the type with
# JsonPlusSerializer(allowed_msgpack_modules=...)).
STRICT_DESELECT := not test_retries_replay_recorded_outcomes \
	and not test_resume_after_a_failure_does_not_repeat_effects \
	and not test_parallel_branches_cancelled_by_a_failing_sibling_do_not_repeat
test-strict: $(STAMP)
	LANGGRAPH_STRICT_MSGPACK=true $(BIN)/pytest -q $(PARALLEL) -m "not faults and not crash" \
		-k "$(STRICT_DESELECT)" $(STRICT_TESTS)

# LangGraph's own test suite (~3,066 saver-backed tests of the installed version's
# sdist) on its stock savers and on ours; fails if a test passes on stock only.
# About 15 minutes; needs Postgres and the package index. See upstream/README.md.
test-upstream: $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,upstream]'
	upstream/run.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict langgraph_resilience

# The guides and the API reference from the docstrings (mkdocs.yml) into site/,
# strict: a broken link or reference fails (tests/test_docs.py runs the same build).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/checkpoint_overhead.py
	$(BIN)/python benchmarks/policy_overhead.py
	$(BIN)/python benchmarks/node_wrapper.py
	$(BIN)/python benchmarks/effect_overhead.py
	$(BIN)/python benchmarks/worker_scaling.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
