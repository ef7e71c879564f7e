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
--   finish(lease, pcall's results) -> fn's results | nil, msg, code (closes
--     the lease in any case; raises fn's error again, unchanged)
-- Returns the method. pcall's results go straight to finish: a Lua
-- function between them would cost every with a call and a vararg copy.
local begin, finish = ...
local pcall = pcall
return function(self, fn, opts)
  local lease, msg, code, holder = begin(self, fn, opts)
  if not lease then return nil, msg, code, holder end
  return finish(lease, pcall(fn, lease))
end
