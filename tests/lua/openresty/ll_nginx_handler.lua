-- Runs in an nginx worker thread (ngx.run_worker_thread), where a blocking
-- acquire freezes only that thread, never the worker's event loop. Each
-- thread has its own Lua VM, reused across calls: the client is cached.
local leaselock = require "leaselock"
local ffi = require "ffi"

ffi.cdef [[ int usleep(unsigned int usec); ]]

local M = {}
local clients = {}

local function read_number(path)
  local f = io.open(path, "r")
  if not f then return 0 end
  local n = tonumber(f:read("*a")) or 0
  f:close()
  return n
end

-- Takes the lease on key, then performs a deliberately non-atomic
-- read-sleep-write of dir/counter. Returns fence, new count, or
-- nil, msg, code.
function M.take(uri, key, dir)
  local client = clients[uri]
  if not client then
    local msg, code
    client, msg, code = leaselock.connect(uri, { label = "openresty" })
    if not client then return nil, msg, code end
    clients[uri] = client
  end
  return client:lock(key, { ttl = 10 }):with(function(lease)
    local marker = dir .. "/inside"
    local f = io.open(marker, "r")
    if f then
      f:close()
      error("overlap: another holder is inside")
    end
    f = assert(io.open(marker, "w"))
    f:write(lease.owner)
    f:close()

    local n = read_number(dir .. "/counter")
    ffi.C.usleep(3000)
    f = assert(io.open(dir .. "/counter", "w"))
    f:write(tostring(n + 1))
    f:close()
    f = assert(io.open(dir .. "/fences", "a"))
    f:write(("%d %d\n"):format(lease.fence, n + 1))
    f:close()
    assert(os.remove(marker))
    return lease.fence, n + 1
  end, { timeout = 60 })
end

return M
