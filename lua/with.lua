-- lock:with(fn [, {timeout=}]) -> fn's results | nil, msg, code [, holder].
--
-- Written in Lua so that fn may yield (coroutine schedulers, OpenResty
-- cosockets after a try): pcall is yieldable in Lua 5.4 and LuaJIT, a
-- C-level lua_pcall is not. fn's error is re-raised unchanged after the
-- release; the lease handle is closed before with returns.
--
-- Embedded in the module at build time (chunk "=leaselock.with") and
-- called once by luaopen_leaselock with its C halves (lock.c, lease.c):
--   begin(lock, fn, opts) -> lease | nil, msg, code [, holder] (BUSY, TIMEOUT)
--   finish(lease) -> true | nil, msg, code (closes the lease in any case)
-- Returns the method.
local begin, finish = ...
local pcall, error = pcall, error
local function done(lease, ok, ...)
  local fok, fmsg, fcode = finish(lease)
  if not ok then error((...), 0) end
  if not fok then return nil, fmsg, fcode end
  return ...
end
return function(self, fn, opts)
  local lease, msg, code, holder = begin(self, fn, opts)
  if not lease then return nil, msg, code, holder end
  return done(lease, pcall(fn, lease))
end
