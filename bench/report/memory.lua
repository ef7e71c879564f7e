-- bench/report/memory.lua URI CYCLES SAMPLES: CYCLES lock:with pairs on one
-- key through the Lua module, printing "cycles rss_kb" SAMPLES times along
-- the way (and once before the first); run by bench/report/run.py.
local leaselock = require "leaselock"
local uri, cycles, samples = arg[1], tonumber(arg[2]), tonumber(arg[3])

local function rss_kb()
  local f = assert(io.open("/proc/self/statm"))
  local _, res = f:read("*l"):match("(%d+)%s+(%d+)")
  f:close()
  return tonumber(res) * 4 -- pages of 4 KiB (x86-64 Linux)
end

local client = assert(leaselock.connect(uri, { label = "bench" }))
local lock = client:lock("bench/memory/lua")
local function noop() return true end
local step = math.max(1, math.floor(cycles / samples))
print(0, rss_kb())
io.stdout:flush()
local done = 0
while done < cycles do
  local n = math.min(step, cycles - done)
  for _ = 1, n do assert(lock:with(noop)) end
  done = done + n
  print(done, rss_kb())
  io.stdout:flush()
end
client:close()
