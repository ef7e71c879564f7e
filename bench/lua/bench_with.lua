-- make bench-lua: acquire+release pairs per second through lock:with beside
-- the same loop run by the C core alone (leaselock._bench_core, with the
-- same lock options), on SQLite and on each server whose URI variable is
-- set. A benchmark, not a test: it prints figures and never fails on them.
local leaselock = require "leaselock"

local tmp = os.getenv("LEASELOCK_BENCH_TMP") or "/tmp"
local interp = jit and jit.version or _VERSION
local n = tonumber(os.getenv("LEASELOCK_BENCH_N") or "") or 2000
local now = leaselock._monotonic

local targets = { { "sqlite", ("sqlite://%s/bench-%s.db"):format(tmp, jit and "jit" or "54") } }
for _, v in ipairs { { "mongodb", "MONGODB_URI" }, { "mysql", "MYSQL_URI" },
                     { "postgresql", "POSTGRES_URI" } } do
  local uri = os.getenv(v[2])
  if uri and uri ~= "" then targets[#targets + 1] = { v[1], uri } end
end

local function noop() return true end

for _, t in ipairs(targets) do
  local name, uri = t[1], t[2]
  local client = assert(leaselock.connect(uri, { label = "bench" }))
  local lock = client:lock(("bench/lua/%s/%d"):format(jit and "jit" or "54", os.time()))
  -- warm up both paths
  for _ = 1, 50 do assert(lock:with(noop)) end
  assert(leaselock._bench_core(lock, 50))
  -- interleaved rounds; the best of each
  local best_lua, best_core = 0, 0
  for _ = 1, 3 do
    local t0 = now()
    for _ = 1, n do assert(lock:with(noop)) end
    best_lua = math.max(best_lua, n / (now() - t0))
    best_core = math.max(best_core, n / assert(leaselock._bench_core(lock, n)))
  end
  print(("lua %-18s %-10s lock:with %9.0f pairs/s   C core %9.0f pairs/s   ratio %.2f (goal >= 0.85)")
    :format(interp, name, best_lua, best_core, best_lua / best_core))
  client:close()
end
