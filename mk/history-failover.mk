# The history checker across failovers (tests/history/README.md, "Across
# failovers"): on each replicated test topology (tests/topology/), the
# same workers as test-history while the primary is killed or cut off and
# a standby promoted, again and again; the checker proves that no failover
# gave a key to two holders, lost an update or sent a fence back.
#
#   make test-history-failover    HISTORY_FAILOVER_SECONDS with 3 failovers
#                                 per topology (a suite of make test, in
#                                 its side lane: its servers are its own)
#   make stress-history-failover  rounds until 100 failovers per topology
#
# A topology whose module tests/topology/ lacks is left out (said so).

HISTORY_FAILOVER_TOPOLOGIES ?= pg-async pg-sync mariadb-semisync galera
HISTORY_FAILOVER_SECONDS ?= 12

# $(1): seconds per round, $(2): failovers per round, $(3): rounds, $(4):
# the summary directory ("" for none). Every topology runs, even after a
# failure.
HISTORY_FAILOVER_RUN = bin=$$(bash tests/faults/install-toxiproxy.sh) || exit 1; rc=0; \
	for t in $(HISTORY_FAILOVER_TOPOLOGIES); do \
	  m=$$($(PYTHON) -c "import sys; sys.path.insert(0, 'tests'); import topology; \
	    print(topology.KINDS['$$t'][0])"); \
	  if [ ! -f tests/topology/$$m.py ]; then echo "history $$t: no tests/topology/$$m.py, left out"; \
	    continue; fi; \
	  sum=; [ -n "$(4)" ] && sum="--summary $(4)/history-failover-$$t.summary"; \
	  TOXIPROXY_BIN="$$bin" $(HIST_RUN) --backend $$t --topology $$t --seconds $(1) \
	    --failovers $(2) --max-seconds $$(($(1) * $(3))) $$sum || rc=1; \
	done; exit $$rc

TEST_SUITES_SIDE += history-failover
.PHONY: test-history-failover stress-history-failover

test-history-failover: $$(HIST_DEPS) toxiproxy
	@$(call HISTORY_FAILOVER_RUN,$(HISTORY_FAILOVER_SECONDS),3,1,)

# Rounds of 60 s with 10 failovers each, for 12 minutes: over 100 failovers
# per topology (a round takes a few seconds more than its 60).
STRESS_TOOLS += history-failover
stress-history-failover: $$(HIST_DEPS) toxiproxy
	@$(call HISTORY_FAILOVER_RUN,60,10,12,$(STRESS_DIR))
