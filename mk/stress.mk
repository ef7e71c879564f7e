# make stress: the long runs of every tool in STRESS_TOOLS, the servers
# started around them (the Makefile's stress target), then one table per
# backend from the summaries in STRESS_DIR.
#
# A stress tool `x` adds itself with `STRESS_TOOLS += x` and defines
# stress-x, which writes one or more summary files into $(STRESS_DIR)
# (key=value lines or a JSON object: tool=, backend=, and any counts, e.g.
# grants, overlaps, lost_updates, faults_injected, simulated_steps,
# fuzz_executions, crashes); tests/history/table.py adds them up per
# backend and fails when a violation column is not 0. The tools today:
# sim (mk/sim.mk), faults (mk/faults.mk), fuzz (mk/fuzz.mk), history
# (mk/history.mk).

STRESS_DIR ?= $(BUILD)/stress
# The grants the table asks for per backend.
STRESS_GOAL_GRANTS ?= 1000000

.PHONY: stress-tools

# Run by `make stress` inside tests/with-servers.sh: every tool, then the table.
stress-tools:
	@PYTHON=$(PYTHON) bash tests/run-stress.sh $(STRESS_DIR) $(STRESS_GOAL_GRANTS) $(STRESS_TOOLS)
