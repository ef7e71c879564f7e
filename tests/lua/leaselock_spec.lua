-- busted specs for the Lua module, run under lua5.4 and LuaJIT against
-- SQLite and every server whose URI variable is set (make test-lua54,
-- make test-luajit).
local leaselock = require "leaselock"
local H = require "ll_helpers"

local is54 = _VERSION == "Lua 5.4"

describe("leaselock module", function()
  it("has a version and the documented functions", function()
    assert.is_string(leaselock._VERSION)
    assert.matches("^%d+%.%d+%.%d+", leaselock._VERSION)
    assert.is_function(leaselock.connect)
  end)

  it("keeps internal functions out of the module table", function()
    for name in pairs(leaselock) do
      assert.is_nil(name:match("^_pool"), name)
    end
    assert.is_function(require("leaselock.pool")._pool_try)  -- acquire_nb's, in nginx pools
  end)

  it("connects to LEASELOCK_URI when no URI is given", function()
    local uri = ("sqlite://%s/lua-env-%s.db"):format(os.getenv("LEASELOCK_TEST_TMP") or "/tmp",
      H.run_id)
    local p = H.spawn([[
      local c = assert(require("leaselock").connect())
      io.write(c.uri)
    ]], { LEASELOCK_URI = uri })
    local out = p:read("*a")
    p:close()
    assert.equals(uri, out)
  end)

  it("returns nil, msg, code for a URI it cannot use", function()
    local c, msg, code = leaselock.connect("nosuch://x")
    assert.is_nil(c)
    assert.is_string(msg)
    assert.truthy(code == "INVALID" or code == "UNSUPPORTED", code)
  end)
end)

for _, backend in ipairs(H.backends()) do
  describe("leaselock on " .. backend.name, function()
    local client, admin

    setup(function()
      client = assert(leaselock.connect(backend.uri, { label = "busted" }))
      admin = assert(leaselock.connect(backend.uri))
    end)

    teardown(function()
      client:close()
      admin:close()
    end)

    it("names the holder of a busy key: message and a 4th value", function()
      local key = H.key("holder")
      local lease = assert(client:lock(key, { ttl = 30 }):acquire())
      local host = io.popen("hostname"):read("*l")
      local pid = lease.owner and client:info(key).holder.pid
      local who = ("%s pid %d (busted), fence %d, expires in "):format(host, pid, lease.fence)
      local none, msg, code, holder = admin:lock(key):try_acquire()
      assert.is_nil(none)
      assert.equals("busy", msg)  -- the documented token, as before
      assert.equals("BUSY", code)
      assert.equals(host, holder.host)
      assert.equals(pid, holder.pid)
      assert.equals("busted", holder.label)
      assert.equals(lease.fence, holder.fence)
      assert.is_false(holder.released)
      assert.truthy(holder.expires_in > 0 and holder.expires_in <= 30)
      assert.equals(1, tostring(holder):find(who, 1, true))
      none, msg, code, holder = admin:lock(key):acquire { timeout = 0.05 }
      assert.equals("TIMEOUT", code)
      assert.truthy(msg:find(('waiting for "%s" (held by %s'):format(key, who), 1, true), msg)
      assert.equals(pid, holder.pid)
      none, msg, code, holder = admin:lock(key):with(function() end, { timeout = 0.05 })
      assert.equals("TIMEOUT", code)
      assert.truthy(msg:find("(held by " .. who, 1, true), msg)
      assert.equals(lease.fence, holder.fence)
      -- A semaphore has no one holder to name.
      local sem = assert(client:semaphore(key .. "/s", { limit = 1 }):acquire())
      none, msg, code, holder = admin:semaphore(key .. "/s", { limit = 1 }):try_acquire()
      assert.equals("BUSY", code)
      assert.is_nil(holder)
      assert.is_true(sem:release())
      assert.is_true(lease:release())
    end)

    it("reads held, lost, state, holds, ttl and expires_in as fields", function()
      local key = H.key("fields")
      local lease = assert(client:lock(key, { ttl = 20 }):acquire())
      assert.is_true(lease.held)  -- a boolean: `if lease.held then` means it
      assert.is_false(lease.lost)
      assert.equals("held", lease.state)
      assert.equals(1, lease.holds)
      assert.equals(20, lease.ttl)
      assert.truthy(lease.expires_in > 0 and lease.expires_in <= 20)
      assert.has_error(function() return lease:held() end)  -- not a method any more
      assert.is_true(lease:release())
      assert.is_false(lease.held)
      assert.equals("released", lease.state)
      assert.equals(0, lease.holds)
      assert.equals(0, lease.expires_in)
    end)

    it("raises for an unknown field of a handle instead of reading nil", function()
      local key = H.key("typo")
      local lock = client:lock(key)
      local lease = assert(lock:acquire())
      local rw = client:rwlock(key .. "/rw")
      for _, case in ipairs {
        { function() return lease.fenc end, "leaselock.lease has no field or method 'fenc'" },
        { function() return lock.tttl end, "leaselock.lock has no field or method 'tttl'" },
        { function() return client.urii end, "leaselock.client has no field or method 'urii'" },
        { function() return rw.exlusive end, "leaselock.rwlock has no field or method 'exlusive'" },
        { function() return lease[1] end, "leaselock.lease has no field or method of type number" },
      } do
        local ok, err = pcall(case[1])
        assert.is_false(ok)
        assert.truthy(err:find(case[2], 1, true), err)
        assert.truthy(err:find("leaselock_spec.lua:%d+:"), err)  -- where it was read
      end
      assert.is_nil(lock.limit)  -- a semaphore's field, nil on a plain lock
      assert.is_true(lease:release())
    end)

    it("prints records, read-write locks and semaphores, and lists methods", function()
      local key = H.key("print")
      local lease = assert(client:lock(key, { ttl = 30 }):acquire())
      local rec = client:info(key)
      assert.matches("^leaselock%.record %(key=" .. key:gsub("%p", "%%%0")
        .. ", held by .- pid %d+ %(busted%), fence %d+, expires in [%d.]+s, holds 1%)$",
        tostring(rec))
      assert.truthy(tostring(client:locks(key)[1]):find("leaselock.record (key=", 1, true))
      assert.is_true(lease:release())
      assert.truthy(tostring(client:info(key)):find("free, fence", 1, true))
      assert.matches("^leaselock%.rwlock %(key=", tostring(client:rwlock(key)))
      assert.matches("^leaselock%.lock %(semaphore, key=.*, limit=3",
        tostring(client:semaphore(key, { limit = 3 })))
      local methods, fields = leaselock.methods(lease)
      assert.same({ "release", "renew" }, methods)
      assert.same({ "expires_in", "fence", "held", "holds", "key", "lost", "owner", "state",
                    "ttl" }, fields)
      methods, fields = leaselock.methods(client:lock(key))
      assert.same({ "acquire", "acquire_nb", "try_acquire", "with" }, methods)
      assert.same({ "key", "limit", "mode" }, fields)
      methods = leaselock.methods(client)
      assert.truthy(#methods >= 10)
      assert.has_error(function() leaselock.methods({}) end)
    end)

    it("acquires, answers BUSY to another owner and releases", function()
      local key = H.key("basic")
      local lock = client:lock(key, { ttl = 10 })
      local lease = assert(lock:acquire { timeout = 5 })
      assert.equals(key, lease.key)
      assert.matches("^%x+$", lease.owner)
      assert.equals(32, #lease.owner)
      assert.is_number(lease.fence)
      assert.is_true(lease.held)
      assert.is_false(lease.lost)

      local other, msg, code = admin:lock(key):try_acquire()
      assert.is_nil(other)
      assert.equals("busy", msg)
      assert.equals("BUSY", code)
      local none, tmsg, tcode = admin:lock(key):acquire { timeout = 0.2 }
      assert.is_nil(none)
      assert.is_string(tmsg)
      assert.equals("TIMEOUT", tcode)

      assert.is_true(lease:release())
      assert.is_false(lease.held)
      local again, nmsg, ncode = lease:release()
      assert.is_nil(again)
      assert.is_string(nmsg)
      assert.equals("NOT_HELD", ncode)

      local next_lease = assert(client:lock(key):try_acquire())
      assert.is_true(next_lease.fence > lease.fence)
      assert.are_not.equal(lease.owner, next_lease.owner)
      next_lease:release()
    end)

    it("refuses at once a second acquire by the coroutine that holds it", function()
      local key = H.key("again")
      local lock = client:lock(key, { ttl = 5 })
      local lease = assert(lock:try_acquire())
      local ok, err = pcall(lock.acquire, lock, { timeout = 30 })
      assert.is_false(ok)
      assert.matches('acquire: "[^"]*again[^"]*" is already held by this coroutine through this '
        .. 'lock %(pass reentrant = true to enter it again%)', err)
      ok, err = pcall(lock.try_acquire, lock)
      assert.is_false(ok)
      assert.matches("try_acquire: .* is already held by this coroutine", err)
      -- another coroutine is another holder: it finds the key busy
      local co = coroutine.wrap(function() return lock:try_acquire() end)
      local none, _, code = co()
      assert.is_nil(none)
      assert.equals("BUSY", code)
      assert.equals(1, lease.holds)
      assert.is_true(lease:release())
      assert.equals(0, lease.holds)
      local again = assert(lock:try_acquire()) -- released: a new lease
      assert.are_not.equal(lease.owner, again.owner)
      again:release()
    end)

    it("refuses inside lock:with an acquire of the key, naming the lock it was taken through", function()
      local key = H.key("again-with")
      local lock = client:lock(key)
      local done = assert(lock:with(function(lease)
        local ok, err = pcall(lock.try_acquire, lock)
        assert.is_false(ok)
        assert.matches("try_acquire: .* is already held by this coroutine through this lock", err)
        ok, err = pcall(lock.with, lock, function() end)
        assert.is_false(ok)
        assert.matches("with: .* is already held by this coroutine through this lock", err)
        ok, err = pcall(function() return client:lock(key):try_acquire() end)
        assert.is_false(ok)
        assert.matches("is already held by this coroutine through another lock of this client", err)
        -- reentrant: the same lease, one more hold
        local again = assert(client:lock(key, { reentrant = true }):acquire())
        assert.equals(lease, again)
        assert.equals(2, lease.holds)
        assert.is_true(again:release())
        return lease.held
      end))
      assert.is_true(done)
      assert.is_nil(admin:info(key).owner)
      local after = assert(lock:try_acquire()) -- with's lease is closed: no longer a hold
      after:release()
    end)

    it("refuses at once an acquire through another lock of the client", function()
      local key = H.key("again2")
      local lease = assert(client:lock(key, { ttl = 5 }):try_acquire())
      collectgarbage() -- the first lock object is gone: its lease is held
      local t0 = os.time()
      local ok, err = pcall(function() return client:lock(key):acquire { timeout = 30 } end)
      assert.is_false(ok)
      assert.matches('acquire: "[^"]*again2[^"]*" is already held by this coroutine through '
        .. 'another lock of this client %(pass reentrant = true', err)
      ok, err = pcall(function()
        return client:lock(key):with(function() end, { timeout = 30 })
      end)
      assert.is_false(ok)
      assert.matches("with: .* is already held by this coroutine through another lock", err)
      assert.is_true(os.time() - t0 < 5)
      -- reentrant = true on the new object enters the same lease again
      local again = assert(client:lock(key, { reentrant = true }):acquire { timeout = 1 })
      assert.equals(lease, again)
      assert.equals(2, lease.holds)
      assert.is_true(again:release())
      -- another coroutine is another holder: it finds the key busy
      local co = coroutine.wrap(function() return client:lock(key):try_acquire() end)
      local none, _, code = co()
      assert.is_nil(none)
      assert.equals("BUSY", code)
      assert.is_true(lease:release())
      local next_lease = assert(client:lock(key):try_acquire())
      assert.is_true(next_lease.fence > lease.fence)
      next_lease:release()
    end)

    it("refuses a held key however the client's other leases were closed", function()
      -- an acquire skips the look-ups of what this coroutine holds while no
      -- lease of the client is open in them (lua/lock.c, open_holds): each
      -- close counts once, and a lease never looked up (a semaphore slot's)
      -- not at all. held is the one open lease after each step: a close
      -- counted twice would hide it.
      local key = H.key("counted")
      local held = assert(client:lock(key):try_acquire())
      local function refused()
        collectgarbage()
        collectgarbage() -- each lease's __gc, after its close
        local ok, err = pcall(function() return client:lock(key):try_acquire() end)
        assert.is_false(ok)
        assert.matches("already held by this coroutine through another lock", err)
      end
      local other = client:lock(H.key("counted-other"))
      refused()
      assert(other:with(function(lease) return lease end)) -- closed by with, then collected
      refused()
      assert.is_true(assert(other:try_acquire()):release()) -- open until collected
      refused()
      local slots = client:semaphore(H.key("counted-slots"), { limit = 2 })
      assert(slots:with(function() return true end))
      assert(slots:try_acquire()):release()
      refused()
      if is54 then
        assert(load([[
          local other = ...
          local l <close> = assert(other:try_acquire())
        ]], "=close-chunk", "t"))(other)
        refused()
      end
      assert.is_true(held:release())
      -- released but open: looked up, and no longer a hold
      local again = assert(client:lock(key):try_acquire())
      assert.is_true(again.fence > held.fence)
      again:release()
    end)

    it("keeps refusing a held key after many other keys came and went", function()
      local key = H.key("kept")
      local lease = assert(client:lock(key):try_acquire())
      for i = 1, 200 do -- past the sweeps of released names
        assert(client:lock(key .. "/" .. i):try_acquire()):release()
      end
      collectgarbage()
      local ok, err = pcall(function() return client:lock(key):try_acquire() end)
      assert.is_false(ok)
      assert.matches("through another lock of this client", err)
      lease:release()
    end)

    it("refuses a read-write lock's self-wait through another rwlock of the client", function()
      local key = H.key("rwagain")
      local w = assert(client:rwlock(key).exclusive:try_acquire())
      local ok, err = pcall(function() return client:rwlock(key).shared:acquire { timeout = 30 } end)
      assert.is_false(ok)
      assert.matches("held exclusively by this coroutine", err)
      ok, err = pcall(function() return client:rwlock(key).exclusive:acquire { timeout = 30 } end)
      assert.is_false(ok)
      assert.matches("already held by this coroutine through another lock", err)
      assert.is_true(w:release())
      local r = assert(client:rwlock(key).shared:try_acquire())
      local r2 = assert(client:rwlock(key).shared:acquire { timeout = 5 }) -- readers: holders of their own
      ok, err = pcall(function() return client:rwlock(key).exclusive:acquire { timeout = 30 } end)
      assert.is_false(ok)
      assert.matches("held shared by this coroutine", err)
      r:release()
      r2:release()
      -- a semaphore slot more, while slots remain, is no self-wait
      local s1 = assert(client:semaphore(key, { limit = 2 }):try_acquire())
      local s2 = assert(client:semaphore(key, { limit = 2 }):acquire { timeout = 5 })
      s1:release()
      s2:release()
    end)

    it("enters again with reentrant = true: the same lease, counted holds", function()
      local key = H.key("reenter")
      local lock = client:lock(key, { ttl = 5, reentrant = true })
      local lease = assert(lock:acquire({ timeout = 1 }))
      local again = assert(lock:try_acquire())
      assert.equals(lease, again)
      assert.equals(2, lease.holds)
      assert.equals(2, assert(admin:info(key)).holds)
      local inside = assert(lock:with(function(l)
        assert.equals(lease, l)
        return lease.holds
      end))
      assert.equals(3, inside)
      assert.equals(2, lease.holds)
      assert.is_true(lease:release())
      assert.is_true(lease.held)
      assert.is_nil(admin:lock(key):try_acquire()) -- one hold is left
      assert.is_true(lease:release())
      assert.is_false(lease.held)
      assert.equals(0, assert(admin:info(key)).holds)
    end)

    it("renews and refuses to renew what it no longer holds", function()
      local key = H.key("renew")
      local lease = assert(client:lock(key, { ttl = 5, auto_renew = false }):try_acquire())
      assert.is_true(lease:renew())
      assert.is_true(lease:renew(20))
      local info = assert(admin:info(key))
      assert.is_true(info.expires_in > 10)
      assert.is_true(admin:force_release(key))
      local ok, msg, code = lease:renew()
      assert.is_nil(ok)
      assert.is_string(msg)
      assert.equals("NOT_HELD", code)
    end)

    it("shows a semaphore and a read-write lock as one lock; released readers leave no record", function()
      local key = H.key("modes-info")
      local sem = client:semaphore(key .. "/s", { limit = 3, ttl = 10 })
      local a = assert(sem:try_acquire())
      local b = assert(sem:try_acquire())
      local info = assert(admin:info(key .. "/s"))
      assert.equals("semaphore", info.mode)
      assert.equals("held", info.state)
      assert.equals(2, info.live)
      assert.equals(2, #info.holders)
      assert.is_true(info.slots >= 2)
      assert.equals("lock", assert(admin:info(a.key)).mode) -- a slot by its own name
      assert.is_true(a:release())
      assert.is_true(b:release())
      assert.equals("free", assert(admin:info(key .. "/s")).state)
      local rw = client:rwlock(key .. "/rw", { ttl = 10 })
      for _ = 1, 10 do assert.is_true(assert(rw.shared:try_acquire()):release()) end
      assert.is_nil(admin:info(key .. "/rw"))
      local r = assert(rw.shared:try_acquire())
      info = assert(admin:info(key .. "/rw"))
      assert.equals("rwlock", info.mode)
      assert.equals(1, info.readers)
      assert.is_false(info.writer)
      assert.equals(r.owner, info.owner)
      assert.is_true(r:release())
      local w = assert(rw.exclusive:try_acquire())
      info = assert(admin:info(key .. "/rw"))
      assert.is_true(info.writer)
      assert.equals(w.fence, info.fence)
      local locks = assert(admin:locks(key))
      assert.equals(2, #locks)
      assert.equals(key .. "/rw", locks[1].key)
      assert.equals(key .. "/s", locks[2].key)
      if backend.name ~= "mongodb" then -- MongoDB does not read them yet
        assert.is_number(info.held_for)
        assert.equals(0, info.queued)
      end
      assert.is_true(w:release())
    end)

    it("inspects, lists and force-releases", function()
      local key = H.key("info")
      assert.is_nil(admin:info(key))
      local lease = assert(client:lock(key, { ttl = 10 }):try_acquire())
      local info = assert(admin:info(key))
      assert.equals(key, info.key)
      assert.equals(lease.owner, info.owner)
      assert.equals(lease.fence, info.fence)
      assert.is_true(info.expires_in > 5 and info.expires_in <= 10)
      assert.is_string(info.holder.host)
      assert.is_number(info.holder.pid)
      assert.equals("busted", info.holder.label)

      local prefix = key:sub(1, #key - 2)
      local found = false
      for _, rec in ipairs(assert(admin:locks(prefix))) do
        assert.equals(prefix, rec.key:sub(1, #prefix))
        if rec.key == key then found = true end
      end
      assert.is_true(found)
      assert.same({}, assert(admin:locks("no-such-prefix/" .. H.run_id)))

      local ok, took = admin:force_release(key)
      assert.is_true(ok)
      assert.is_true(took)
      info = assert(admin:info(key))
      assert.is_nil(info.owner)
      assert.equals(lease.fence, info.fence)
      local ok2, took2 = admin:force_release(key)
      assert.is_true(ok2)
      assert.is_false(took2)
      local after = assert(admin:lock(key):try_acquire())
      assert.is_true(after.fence > lease.fence)
      after:release()
    end)

    it("keeps a released key blocked for min_hold", function()
      local key = H.key("minhold")
      local lease = assert(client:lock(key, { min_hold = 0.5 }):try_acquire())
      assert.is_true(lease:release())
      local _, _, code = client:lock(key):try_acquire()
      assert.equals("BUSY", code)
      local later = assert(client:lock(key):acquire { timeout = 5 })
      later:release()
    end)

    it("lock:with returns fn's results and releases", function()
      local key = H.key("with")
      local lock = client:lock(key)
      local seen
      local a, b, c = lock:with(function(lease)
        seen = lease
        assert.is_true(lease.held)
        assert.equals(lease.owner, admin:info(key).owner)
        return 1, nil, "three"
      end)
      assert.equals(1, a)
      assert.is_nil(b)
      assert.equals("three", c)
      assert.is_nil(admin:info(key).owner)
      assert.is_false(seen.held)
      assert.matches("closed", tostring(seen))
      assert.has_error(function() seen:renew() end,
        "attempt to use a closed leaselock.lease (in 'renew')")
    end)

    it("lock:with returns all of fn's results: none, trailing nils, many", function()
      local lock = client:lock(H.key("with-count"))
      assert.equals(0, select("#", lock:with(function() end)))
      assert.equals(3, select("#", lock:with(function() return 1, nil, nil end)))
      local many = {}
      for i = 1, 300 do many[i] = i end
      local unpack = table.unpack or unpack
      local got = { lock:with(function() return unpack(many, 1, 300) end) }
      assert.equals(300, #got)
      assert.equals(300, got[300])
    end)

    it("lock:with re-raises fn's error after releasing", function()
      local key = H.key("with-error")
      local lock = client:lock(key)
      local owner_during
      local ok, err = pcall(lock.with, lock, function(lease)
        owner_during = admin:info(key).owner
        assert.equals(lease.owner, owner_during)
        error("inside fn")
      end)
      assert.is_false(ok)
      assert.matches("inside fn", err)
      assert.is_nil(admin:info(key).owner)
      -- error objects pass through unchanged
      local obj = { reason = "table error" }
      local ok2, err2 = pcall(lock.with, lock, function() error(obj) end)
      assert.is_false(ok2)
      assert.equals(obj, err2)
      assert.is_nil(admin:info(key).owner)
    end)

    it("lock:with returns nil, msg, code when the lock is not acquired", function()
      local key = H.key("with-busy")
      local holder = assert(admin:lock(key):try_acquire())
      local ran = false
      local r, msg, code = client:lock(key):with(function() ran = true end, { timeout = 0 })
      assert.is_nil(r)
      assert.equals("busy", msg)
      assert.equals("BUSY", code)
      r, msg, code = client:lock(key):with(function() ran = true end, { timeout = 0.2 })
      assert.is_nil(r)
      assert.is_string(msg)
      assert.equals("TIMEOUT", code)
      assert.is_false(ran)
      holder:release()
    end)

    it("lock:with returns fn's results when fn released the lease itself", function()
      local key = H.key("with-self-release")
      local lock = client:lock(key)
      local a, b = lock:with(function(l)
        assert.is_true(l:release())
        return "result", 2
      end)
      assert.equals("result", a)
      assert.equals(2, b)
      assert.is_nil(admin:info(key).owner)
      -- fn's own release result is fn's to handle: with does not repeat it
      a = lock:with(function(l)
        assert.is_true(admin:force_release(key))
        local ok, _, code = l:release()
        assert.is_nil(ok)
        assert.equals("NOT_HELD", code)
        return "handled"
      end)
      assert.equals("handled", a)
    end)

    it("lock:with reports NOT_HELD when the lease was taken over while fn ran", function()
      local key = H.key("with-taken")
      local r, msg, code = client:lock(key):with(function()
        assert.is_true(admin:force_release(key))
        return "result"
      end)
      assert.is_nil(r)
      assert.matches("no longer held", msg)
      assert.equals("NOT_HELD", code)
    end)

    it("lock:with returns fn's results when fn closed the client (close released it)", function()
      local key = H.key("with-closed-client")
      local c = assert(leaselock.connect(backend.uri))
      local r = c:lock(key):with(function(l)
        assert.is_true(c:close())
        assert.is_false(l.held)
        assert.equals("released", l.state)
        return "result"
      end)
      assert.equals("result", r)
      assert.is_nil(admin:info(key).owner)
    end)

    if backend.name == "sqlite" then
      it("answers BUSY at once while another process holds the file locked", function()
        local key = H.key("file-locked")
        local path = assert(backend.uri:match("^sqlite://(/.*)$"))
        local c = assert(leaselock.connect(backend.uri))
        assert(assert(c:lock("warm"):try_acquire()):release())
        local p = assert(io.popen(("printf 'BEGIN EXCLUSIVE;\\n.print locked\\n"
          .. ".shell sleep 4\\nCOMMIT;\\n' | sqlite3 '%s'"):format(path)))
        assert.equals("locked", p:read("*l"))
        -- A one-try acquire (what an OpenResty worker makes) waits a
        -- moment at most: 20 of them within a second, not 10 s each.
        local t0 = os.time()
        for _ = 1, 20 do
          local l, msg, code = c:lock(key):try_acquire()
          assert.is_nil(l)
          assert.equals("BUSY", code, msg)
        end
        local l, _, code = c:lock(key):acquire { timeout = 1 }
        assert.is_nil(l)
        assert.equals("TIMEOUT", code)
        assert.is_true(os.time() - t0 <= 3)
        p:close()
        c:close()
      end)

      it("lock:with returns nil, msg, BACKEND when the final release fails", function()
        local key = H.key("with-backend")
        local path = assert(backend.uri:match("^sqlite://(/.*)$"))
        local c = assert(leaselock.connect(backend.uri .. "?busy_timeout_ms=50"))
        local owner, p
        local r, msg, code = c:lock(key):with(function(l)
          owner = l.owner
          -- another process holds SQLite's write lock past the release
          p = assert(io.popen(("printf 'BEGIN EXCLUSIVE;\\n.print locked\\n"
            .. ".shell sleep 0.5\\nCOMMIT;\\n' | sqlite3 '%s'"):format(path)))
          assert.equals("locked", p:read("*l"))
          return "result"
        end)
        assert.is_nil(r)
        assert.matches("sqlite: ", msg)
        assert.equals("BACKEND", code)
        p:close()
        -- the release did not land: the lock's state was unknown, as reported
        assert.equals(owner, admin:info(key).owner)
        assert.is_true(admin:force_release(key))
        c:close()
      end)
    end

    if is54 then
      it("<close> releases at scope exit, normal and by error", function()
        local key = H.key("close")
        local run = assert(load([[
          local lock, admin, key, fail = ...
          local lease <close> = assert(lock:acquire { timeout = 5 })
          assert(admin:info(key).owner == lease.owner)
          if fail then error("scope error") end
          return lease
        ]], "=close-chunk", "t"))
        local lock = client:lock(key)
        local lease = run(lock, admin, key, false)
        assert.is_nil(admin:info(key).owner)
        assert.is_false(lease.held)
        local ok, err = pcall(run, lock, admin, key, true)
        assert.is_false(ok)
        assert.matches("scope error", err)
        assert.is_nil(admin:info(key).owner)
        local again = assert(lock:try_acquire())
        again:release()
      end)
    end

    it("closes a lease that is garbage collected", function()
      local key = H.key("gc")
      do
        local _ = assert(client:lock(key):try_acquire())
      end
      collectgarbage()
      collectgarbage()
      assert.is_nil(admin:info(key).owner)
      local lease = assert(client:lock(key):try_acquire())
      lease:release()
    end)

    it("lets coroutines wait their turn by trying and yielding", function()
      local key = H.key("coroutines")
      local lock = client:lock(key)
      local inside, max_inside, fences, rounds = 0, 0, {}, 0
      local workers = {}
      for _ = 1, 4 do
        workers[#workers + 1] = function()
          for _ = 1, 3 do
            local lease = assert(H.acquire_yielding(lock))
            inside = inside + 1
            max_inside = math.max(max_inside, inside)
            fences[#fences + 1] = lease.fence
            for _ = 1, 3 do coroutine.yield() end -- hold while others try
            inside = inside - 1
            assert(lease:release())
            rounds = rounds + 1
            coroutine.yield()
          end
        end
      end
      H.run_coroutines(workers)
      assert.equals(12, rounds)
      assert.equals(1, max_inside)
      for i = 2, #fences do assert.is_true(fences[i] > fences[i - 1]) end
    end)

    it("lets fn yield inside lock:with", function()
      local key = H.key("with-yield")
      local lock = client:lock(key)
      local order = {}
      H.run_coroutines {
        function()
          assert(lock:with(function()
            order[#order + 1] = "a-in"
            coroutine.yield()
            order[#order + 1] = "a-out"
            return true
          end, { timeout = 0 }))
        end,
        function()
          local r, _, code = lock:with(function() order[#order + 1] = "b-in" end, { timeout = 0 })
          assert.is_nil(r)
          assert.equals("BUSY", code)
        end,
      }
      assert.same({ "a-in", "a-out" }, order)
    end)

    it("blocks the whole thread in a blocking acquire (documented)", function()
      local key = H.key("blocking")
      local lock = client:lock(key)
      local code
      H.run_coroutines {
        function()
          local lease = assert(lock:try_acquire())
          coroutine.yield()
          lease:release()
        end,
        function()
          -- the holder cannot run while this waits: it times out
          local _, _, c = lock:acquire { timeout = 0.3 }
          code = c
        end,
      }
      assert.equals("TIMEOUT", code)
    end)

    it("waits for a lease held by another process", function()
      local key = H.key("process")
      local child = H.spawn(([[
        local c = assert(require("leaselock").connect(%q))
        local lease = assert(c:lock(%q, { ttl = 10 }):try_acquire())
        io.write(lease.fence, "\n"); io.flush()
        os.execute("sleep 0.5")
        assert(lease:release())
      ]]):format(backend.uri, key))
      local child_fence = tonumber(child:read("*l"))
      assert.is_number(child_fence)
      local _, _, code = client:lock(key):try_acquire()
      assert.equals("BUSY", code)
      local lease = assert(client:lock(key):acquire { timeout = 10 })
      assert.is_true(lease.fence > child_fence)
      child:close()
      lease:release()
    end)

    it("detects loss on the Lua side and calls on_lost once", function()
      local key = H.key("lost")
      local calls, got = 0, nil
      local lock = client:lock(key, {
        ttl = 0.3, auto_renew = false,
        on_lost = function(l) calls = calls + 1; got = l end,
      })
      local lease = assert(lock:try_acquire())
      H.sleep(0.5)
      -- the loss is recorded by the core; on_lost runs when Lua looks
      assert.equals(0, calls)
      assert.is_false(lease.held)
      assert.equals(1, calls)
      assert.equals(lease, got)
      assert.is_true(lease.lost)
      assert.matches("lost", tostring(lease))
      assert.equals(1, calls)
      local ok, _, code = lease:renew()
      assert.is_nil(ok)
      assert.truthy(code == "LOST" or code == "NOT_HELD", code)
    end)

    it("lock:with reports a lease lost while fn ran", function()
      local key = H.key("with-lost")
      local calls = 0
      local lock = client:lock(key, {
        ttl = 0.3, auto_renew = false, on_lost = function() calls = calls + 1 end,
      })
      local r, msg, code = lock:with(function() H.sleep(0.5); return "done" end)
      assert.is_nil(r)
      assert.matches("lost", msg)
      assert.equals("LOST", code)
      assert.equals(1, calls)
    end)

    it("marks an auto-renewed lease lost when another owner clears it", function()
      local key = H.key("renew-lost")
      local lease = assert(client:lock(key, { ttl = 0.6 }):try_acquire())
      H.sleep(0.25)
      assert.is_true(lease.held) -- renewed past a third of the TTL
      assert.is_true(admin:force_release(key))
      H.sleep(0.9)
      assert.is_true(lease.lost)
      assert.is_false(lease.held)
    end)

    it("keeps a lease lost before its client closed lost", function()
      local key = H.key("lost-then-closed")
      local c = assert(leaselock.connect(backend.uri))
      local calls = 0
      local lease = assert(c:lock(key, {
        ttl = 0.2, auto_renew = false, on_lost = function() calls = calls + 1 end,
      }):try_acquire())
      H.sleep(0.3)
      c:close()
      assert.is_false(lease.held)
      assert.is_true(lease.lost)
      assert.equals(1, calls)
      assert.matches(", lost%)", tostring(lease))
    end)

    it("calls on_lost protected: its error replaces nothing", function()
      local key = H.key("on-lost-error")
      local calls = 0
      local warnings = {}
      local previous = leaselock.on_warning(function(msg) warnings[#warnings + 1] = msg end)
      finally(function() leaselock.on_warning(previous) end)
      local lock = client:lock(key, {
        ttl = 0.1, auto_renew = false,
        on_lost = function() calls = calls + 1; error("on_lost failed (as this test expects)") end,
      })
      -- held() answers
      local lease = assert(lock:try_acquire())
      H.sleep(0.15)
      assert.is_false(lease.held)
      assert.equals(1, calls)
      assert.is_true(lease.lost)
      -- with's own LOST failure
      local r, msg, code = lock:with(function() H.sleep(0.15); return "done" end)
      assert.is_nil(r)
      assert.matches("lost", msg)
      assert.equals("LOST", code)
      assert.equals(2, calls)
      -- fn's error passes through unchanged
      local ok, err = pcall(lock.with, lock, function()
        H.sleep(0.15)
        error("fn failed", 0)
      end)
      assert.is_false(ok)
      assert.equals("fn failed", err)
      assert.equals(3, calls)
      -- release() answers too (whatever the core says of a lost lease)
      lease = assert(lock:try_acquire())
      H.sleep(0.15)
      assert.has_no.errors(function() lease:release() end)
      assert.equals(4, calls)
      if is54 then -- and <close> keeps the scope's error
        local run = assert(load([[
          local lock, sleep = ...
          local lease <close> = assert(lock:try_acquire())
          sleep(0.15)
          error("scope error", 0)
        ]], "=close-on-lost", "t"))
        local cok, cerr = pcall(run, lock, H.sleep)
        assert.is_false(cok)
        assert.equals("scope error", cerr)
        assert.equals(5, calls)
      end
      -- each error went to the warning function, none to the output
      assert.equals(calls, #warnings)
      for _, w in ipairs(warnings) do
        assert.matches("^leaselock: error in on_lost %(.*on_lost failed %(as this test expects%)%)$", w)
      end
    end)

    it("sends on_lost errors to leaselock.on_warning until it is reset", function()
      local key = H.key("on-warning")
      local got = {}
      local lock = client:lock(key, { ttl = 0.1, auto_renew = false,
        on_lost = function() error("lost, and says so", 0) end })
      assert.is_nil(leaselock.on_warning(function(msg) got[#got + 1] = msg end))
      local lease = assert(lock:try_acquire())
      H.sleep(0.15)
      assert.is_false(lease.held)
      local mine = leaselock.on_warning(nil)
      assert.is_function(mine)
      assert.same({ "leaselock: error in on_lost (lost, and says so)" }, got)
      assert.has_error(function() leaselock.on_warning(42) end,
        "bad argument #1 to 'on_warning' (function or nil expected, got number)")
    end)

    it("reports an on_lost error as a warning (5.4) or on stderr (LuaJIT)", function()
      local key = H.key("on-lost-report")
      local p = H.spawn(([[
        if warn then warn("@on") end
        local c = assert(require("leaselock").connect(%q))
        local lease = assert(c:lock(%q, { ttl = 0.1, auto_renew = false,
          on_lost = function() error("on_lost says no", 0) end }):try_acquire())
        os.execute("sleep 0.2")
        io.stdout:write("held=", tostring(lease.held), "\n"); io.stdout:flush()
      ]]):format(backend.uri, key), nil, true)
      local out = p:read("*a")
      p:close()
      assert.matches("held=false", out, 1, true)
      assert.matches("leaselock: error in on_lost (on_lost says no)", out, 1, true)
    end)

    it("says what each handle is in tostring", function()
      local key = H.key("tostring")
      local lock = client:lock(key)
      assert.matches("^leaselock.client %(" .. backend.name, tostring(client))
      assert.matches("^leaselock.lock %(key=" .. key:gsub("%p", "%%%0"), tostring(lock))
      local lease = assert(lock:try_acquire())
      assert.matches("fence=" .. lease.fence .. ", held", tostring(lease))
      lease:release()
      assert.matches("released", tostring(lease))
    end)

    it("releases what the client holds at close, then answers NOT_HELD", function()
      local key = H.key("closed-client")
      local c = assert(leaselock.connect(backend.uri))
      local lease = assert(c:lock(key, { ttl = 5 }):try_acquire())
      local released = assert(c:lock(H.key("closed-client-released")):try_acquire())
      assert.is_true(released:release())
      local others = assert(client:lock(H.key("closed-client-other")):try_acquire())
      assert.equals("held", lease.state)
      assert.is_true(c:close())
      assert.is_true(c:close()) -- idempotent
      assert.matches("closed", tostring(c))
      assert.is_false(lease.held)
      assert.is_false(lease.lost)
      assert.equals("released", lease.state)
      assert.matches("fence=" .. lease.fence .. ", released%)", tostring(lease))
      assert.matches(", released%)", tostring(released))
      local ok, msg, code = lease:release()
      assert.is_nil(ok)
      assert.matches("client of this lease is closed", msg)
      assert.equals("NOT_HELD", code)
      ok, msg, code = lease:renew()
      assert.is_nil(ok)
      assert.matches("client of this lease is closed", msg)
      assert.equals("NOT_HELD", code)
      -- released by the close; another client's lease untouched
      assert.is_nil(admin:info(key).owner)
      assert.equals("held", others.state)
      assert.equals(others.owner, admin:info(others.key).owner)
      assert.is_true(others:release())
      for _, use in ipairs { "lock", "info", "locks", "force_release", "durability" } do
        assert.has_error(function() c[use](c, key) end,
          ("attempt to use a closed leaselock.client (in '%s')"):format(use))
      end
    end)

    if backend.name == "sqlite" then
      it("client:close() reports a release that failed, and is closed all the same", function()
        local key = H.key("close-fails")
        local path = assert(backend.uri:match("^sqlite://(/.*)$"))
        local c = assert(leaselock.connect(backend.uri .. "?busy_timeout_ms=50"))
        local lease = assert(c:lock(key):try_acquire())
        local p = assert(io.popen(("printf 'BEGIN EXCLUSIVE;\\n.print locked\\n"
          .. ".shell sleep 0.5\\nCOMMIT;\\n' | sqlite3 '%s'"):format(path)))
        assert.equals("locked", p:read("*l"))
        local ok, msg, code = c:close()
        p:close()
        assert.is_nil(ok)
        assert.matches("^sqlite: release: database is locked", msg)
        assert.equals("BACKEND", code)
        assert.is_true(c:close())
        assert.is_false(lease.held)
        assert.has_error(function() c:lock(key) end,
          "attempt to use a closed leaselock.client (in 'lock')")
        assert.is_true(admin:force_release(key))
      end)
    end

    if is54 then
      it("<close> on a client releases what it holds", function()
        local key = H.key("client-tbc")
        local run = assert(load([[
          local leaselock, uri, key = ...
          local c <close> = assert(leaselock.connect(uri))
          return assert(c:lock(key):try_acquire())
        ]], "=client-tbc", "t"))
        local lease = run(leaselock, backend.uri, key)
        assert.equals("released", lease.state)
        assert.is_nil(admin:info(key).owner)
      end)
    end
  end)
end

describe("bad input", function()
  local client, lock, lease
  setup(function()
    client = assert(leaselock.connect(H.backends()[1].uri))
    lock = client:lock(H.key("bad"))
    lease = assert(lock:try_acquire())
  end)
  teardown(function()
    lease:release()
    client:close()
  end)

  -- Each case: a call and the text its error must contain.
  local cases = {
    { function() leaselock.connect(42) end,
      "bad argument #1 to 'connect' (uri: string expected, got number)" },
    { function() leaselock.connect("sqlite:///tmp/x\0y") end,
      "bad argument #1 to 'connect' (uri must not contain a NUL byte)" },
    { function() leaselock.connect(nil, 5) end,
      "bad argument #2 to 'connect' (options: table expected, got number)" },
    { function() leaselock.connect(nil, { label = 5 }) end,
      "bad argument #2 to 'connect' (label must be a string, got number)" },
    { function() leaselock.connect(nil, { lable = "x" }) end,
      "bad argument #2 to 'connect' (unknown option 'lable')" },
    { function() leaselock.connect(nil, { label = "a\0b" }) end,
      "bad argument #2 to 'connect' (label must not contain a NUL byte)" },
    { function() leaselock.connect(nil, { label = ("l"):rep(256) }) end,
      "bad argument #2 to 'connect' (label must be at most 255 bytes, got 256)" },
    { function() leaselock.connect(nil, { label = "bad\255utf8" }) end,
      "bad argument #2 to 'connect' (label is not valid UTF-8)" },
    { function() client:lock() end,
      "bad argument #1 to 'lock' (key: string expected, got no value)" },
    { function() client:lock(7) end,
      "bad argument #1 to 'lock' (key: string expected, got number)" },
    { function() client:lock("") end,
      "bad argument #1 to 'lock' (key must be 1 to 255 bytes, got 0)" },
    { function() client:lock(("k"):rep(256)) end,
      "bad argument #1 to 'lock' (key must be 1 to 255 bytes, got 256)" },
    { function() client:lock("a\0b") end,
      "bad argument #1 to 'lock' (key must not contain a NUL byte)" },
    { function() client:lock("bad\255utf8") end,
      "bad argument #1 to 'lock' (key is not valid UTF-8)" },
    { function() client:lock("\237\160\128") end, -- a UTF-16 surrogate
      "bad argument #1 to 'lock' (key is not valid UTF-8)" },
    { function() client:lock("k", "opts") end,
      "bad argument #2 to 'lock' (options: table expected, got string)" },
    { function() client:lock("k", { tll = 30 }) end,
      "bad argument #2 to 'lock' (unknown option 'tll')" },
    { function() client:lock("k", { [1] = 30 }) end,
      "bad argument #2 to 'lock' (option names must be strings, got number)" },
    { function() client:lock("k", { ttl = 0 }) end,
      "bad argument #2 to 'lock' (ttl must be > 0 and at most 30 days (2592000 s), got 0)" },
    { function() client:lock("k", { ttl = -1 }) end,
      "bad argument #2 to 'lock' (ttl must be > 0 and at most 30 days (2592000 s), got -1)" },
    { function() client:lock("k", { ttl = 0 / 0 }) end,
      "bad argument #2 to 'lock' (ttl must be a number of seconds, got nan)" },
    { function() client:lock("k", { ttl = math.huge }) end,
      "bad argument #2 to 'lock' (ttl must be > 0 and at most 30 days (2592000 s), got inf)" },
    { function() client:lock("k", { ttl = 31 * 86400 }) end,
      "bad argument #2 to 'lock' (ttl must be > 0 and at most 30 days (2592000 s), got 2678400)" },
    { function() client:lock("k", { ttl = "30" }) end,
      "bad argument #2 to 'lock' (ttl must be a number of seconds, got string)" },
    { function() client:lock("k", { min_hold = -0.5 }) end,
      "bad argument #2 to 'lock' (min_hold must be >= 0 and at most 30 days (2592000 s), got -0.5)" },
    { function() client:lock("k", { auto_renew = "yes" }) end,
      "bad argument #2 to 'lock' (auto_renew must be a boolean, got string)" },
    { function() client:lock("k", { fair = 1 }) end,
      "bad argument #2 to 'lock' (fair must be a boolean, got number)" },
    { function() client:lock("k", { reentrant = "yes" }) end,
      "bad argument #2 to 'lock' (reentrant must be a boolean, got string)" },
    { function() client:lock("k", { on_lost = 42 }) end,
      "bad argument #2 to 'lock' (on_lost must be a function, got number)" },
    { function() lock:acquire(5) end,
      "bad argument #1 to 'acquire' (options: table expected, got number)" },
    { function() lock:acquire { timeout = -1 } end,
      "bad argument #1 to 'acquire' (timeout must be >= 0 seconds (nil waits forever), got -1)" },
    { function() lock:acquire { timeout = 0 / 0 } end,
      "bad argument #1 to 'acquire' (timeout must be a number of seconds, got nan)" },
    { function() lock:acquire { timeout = -math.huge } end,
      "bad argument #1 to 'acquire' (timeout must be >= 0 seconds (nil waits forever), got -inf)" },
    { function() lock:acquire { timeout = 31 * 86400 } end,
      "bad argument #1 to 'acquire' (timeout must be at most 30 days (2592000 s), "
        .. "or math.huge to wait forever, got 2678400)" },
    { function() lock:acquire { timeout = 1e300 } end,
      "bad argument #1 to 'acquire' (timeout must be at most 30 days (2592000 s), "
        .. "or math.huge to wait forever, got 1e+300)" },
    { function() lock:acquire { timeout = "5" } end,
      "bad argument #1 to 'acquire' (timeout must be a number of seconds, got string)" },
    { function() lock:with(print, { timeout = 1e300 }) end,
      "bad argument #2 to 'with' (timeout must be at most 30 days (2592000 s), "
        .. "or math.huge to wait forever, got 1e+300)" },
    { function() lock:acquire { wait = 1 } end,
      "bad argument #1 to 'acquire' (unknown option 'wait')" },
    { function() lock:with() end,
      "bad argument #1 to 'with' (function expected, got nil)" },
    { function() lock:with("f") end,
      "bad argument #1 to 'with' (function expected, got string)" },
    { function() lock:with(print, { timeout = -2 }) end,
      "bad argument #2 to 'with' (timeout must be >= 0 seconds (nil waits forever), got -2)" },
    { function() lock.acquire(client) end,
      "calling 'acquire' on bad self (leaselock.lock expected, got userdata)" },
    { function() lock.with(nil, print) end,
      "calling 'with' on bad self (leaselock.lock expected, got nil)" },
    { function() client.info(lock, "k") end,
      "calling 'info' on bad self (leaselock.client expected, got userdata)" },
    { function() client:info(nil) end,
      "bad argument #1 to 'info' (key: string expected, got nil)" },
    { function() client:info("") end,
      "bad argument #1 to 'info' (key must be 1 to 255 bytes, got 0)" },
    { function() client:locks(1) end,
      "bad argument #1 to 'locks' (prefix: string expected, got number)" },
    { function() client:locks(("p"):rep(300)) end,
      "bad argument #1 to 'locks' (prefix must be 0 to 255 bytes, got 300)" },
    { function() client:force_release({}) end,
      "bad argument #1 to 'force_release' (key: string expected, got table)" },
    { function() lease:renew(0) end,
      "bad argument #1 to 'renew' (ttl must be > 0 and at most 30 days (2592000 s), got 0)" },
    { function() lease:renew("10") end,
      "bad argument #1 to 'renew' (ttl must be a number of seconds, got string)" },
    { function() lease.release(lock) end,
      "calling 'release' on bad self (leaselock.lease expected, got userdata)" },
  }

  for i, case in ipairs(cases) do
    it(("case %d raises: %s"):format(i, case[2]), function()
      local ok, err = pcall(case[1])
      assert.is_false(ok)
      assert.is_string(err)
      -- plain find: the message is quoted, not a pattern
      assert.truthy(err:find(case[2], 1, true), ("got: %s"):format(err))
    end)
  end

  it("has at least 20 cases", function()
    assert.is_true(#cases >= 20)
  end)

  it("accepts a timeout of 30 days, and math.huge (wait forever)", function()
    local free = client:lock(H.key("timeouts"))
    for _, t in ipairs { 30 * 86400, math.huge } do
      local l = assert(free:acquire { timeout = t })
      assert.is_true(l:release())
    end
    assert.equals("waited", free:with(function() return "waited" end, { timeout = math.huge }))
  end)

  it("stores a label of 255 bytes of UTF-8 whole", function()
    local label = ("é"):rep(127) .. "x"
    assert.equals(255, #label)
    local c = assert(leaselock.connect(H.backends()[1].uri, { label = label }))
    local key = H.key("label")
    local l = assert(c:lock(key):try_acquire())
    assert.equals(label, c:info(key).holder.label)
    l:release()
    c:close()
  end)

  it("keeps handles' metatables private", function()
    assert.equals("leaselock handles are read-only", getmetatable(client))
  end)
end)

-- client:prune([prefix [, older_than]]): the free records under a prefix
-- go, never a live lease or one kept by min_hold; returns how many.
for _, backend in ipairs(H.backends()) do
  describe("prune on " .. backend.name, function()
    local client

    setup(function()
      client = assert(leaselock.connect(backend.uri, { label = "busted-prune" }))
    end)

    teardown(function()
      client:close()
    end)

    local function released(key, opts)
      local l = assert(client:lock(key, opts):try_acquire())
      assert.is_true(l:release())
    end

    local function keys(prefix)
      local out = {}
      for i, r in ipairs(assert(client:locks(prefix))) do out[i] = r.key end
      return out
    end

    it("deletes expired records under the prefix only", function()
      local p = H.key("prune")
      local live = assert(client:lock(p .. "/live", { ttl = 10 }):try_acquire())
      released(p .. "/hold", { ttl = 10, min_hold = 10 })
      released(p .. "/gone1")
      released(p .. "/gone2")
      released(p .. "x/gone")
      assert.equals(2, client:prune(p .. "/"))
      assert.same({ p .. "/hold", p .. "/live", p .. "x/gone" }, keys(p))
      assert.is_true(live.held)
      assert.is_true(live:release())
      assert.equals(1, client:prune(p .. "/", 0))
      -- a pruned key starts its fence again
      local l = assert(client:lock(p .. "/gone1"):try_acquire())
      assert.equals(1, l.fence)
      assert.is_true(l:release())
      assert.equals(2, client:prune(p))
    end)

    it("keeps records expired less than older_than ago", function()
      local p = H.key("prune-old")
      released(p .. "/a")
      H.sleep(1.5)
      released(p .. "/b")
      H.sleep(0.3)
      assert.equals(0, client:prune(p .. "/", 5))
      assert.equals(1, client:prune(p .. "/", 0.9))
      assert.same({ p .. "/b" }, keys(p .. "/"))
      assert.equals(1, client:prune(p .. "/"))
    end)

    it("raises for bad arguments", function()
      for _, case in ipairs {
        { function() client:prune(1) end, "bad argument #1 to 'prune' (prefix: string expected" },
        { function() client:prune("", -1) end, "bad argument #2 to 'prune' (older_than must be >= 0" },
        { function() client:prune("", "1") end,
          "bad argument #2 to 'prune' (older_than must be a number of seconds, got string)" },
        { function() client:prune("", 31 * 86400) end, "at most 30 days" },
      } do
        local ok, err = pcall(case[1])
        assert.is_false(ok)
        assert.truthy(tostring(err):find(case[2], 1, true), tostring(err))
      end
    end)
  end)
end
-- client:durability(): how the database makes a grant survive a failover;
-- the URI options durability= and max_ttl= of PostgreSQL and MySQL.
for _, backend in ipairs(H.backends()) do
  describe("durability on " .. backend.name, function()
    local server = backend.name == "mysql" or backend.name == "postgresql"

    local function with_options(opts)
      return backend.uri .. (backend.uri:find("?", 1, true) and "&" or "?") .. opts
    end

    it("returns the level, policy, settings, primary, fence floor and bounds", function()
      local c = assert(leaselock.connect(backend.uri))
      local d = assert(c:durability())
      local levels = { durable = true, ["at-risk"] = true, standalone = true, unknown = true }
      assert.is_true(levels[d.level], d.level)
      assert.equals("report", d.policy)
      assert.is_true(type(d.detail) == "string" and #d.detail > 0)
      assert.is_true(math.type == nil or math.type(d.fence_floor) == "integer")
      assert.is_true(d.fence_floor >= 0 and d.lock_delay >= 0)
      if backend.name == "sqlite" then
        assert.equals("standalone", d.level)
        assert.is_nil(d.primary)
        assert.is_nil(d.max_ttl)
        assert.equals(0, d.fence_floor)
        assert.equals(0, d.lock_delay)
      elseif server then
        -- no replica on the test servers; their first connect is no failover
        assert.equals("standalone", d.level)
        assert.is_true(type(d.primary) == "string" and #d.primary > 0)
        assert.equals(60, d.max_ttl)
        assert.equals(0, d.lock_delay)
      end
      assert.same(d, assert(c:durability()))
      c:close()
    end)

    if server then
      it("takes its policy from the URI; require refuses grants without a standby", function()
        local c = assert(leaselock.connect(with_options("durability=require")))
        assert.equals("require", c:durability().policy)
        local key = H.key("durability-require")
        local l, msg, code = c:lock(key):try_acquire()
        assert.is_nil(l)
        assert.matches("durability=require", msg)
        assert.equals("BACKEND", code)
        c:close()
        c = assert(leaselock.connect(with_options("durability=off")))
        assert.equals("off", c:durability().policy)
        c:close()
      end)

      it("refuses a bad durability= or max_ttl= and a TTL over max_ttl", function()
        local c, msg, code = leaselock.connect(with_options("durability=maybe"))
        assert.is_nil(c)
        assert.truthy(msg:find('durability="maybe": expected report, require or off', 1, true), msg)
        assert.equals("INVALID", code)
        c, msg, code = leaselock.connect(with_options("max_ttl=500ms"))
        assert.is_nil(c)
        assert.truthy(msg:find('max_ttl="500ms": expected a duration from 1s to 30d', 1, true), msg)
        assert.equals("INVALID", code)
        -- an argument the table refuses: raised, as a bad TTL is
        c = assert(leaselock.connect(backend.uri))
        local ok, err = pcall(function()
          c:lock(H.key("durability-ttl"), { ttl = 61 }):try_acquire()
        end)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("over this table's max_ttl of 60000 ms", 1, true), err)
        assert(c:lock(H.key("durability-ttl"), { ttl = 60 }):try_acquire()):release()
        c:close()
      end)

      it("keeps max_ttl with the table: a new table takes the URI's", function()
        local table_opt = ("table=ll_dur_lua_%s_%s"):format(jit and "jit" or "54", H.run_id)
        local c = assert(leaselock.connect(with_options(table_opt .. "&max_ttl=5s")))
        assert.equals(5, c:durability().max_ttl)
        local ok, err = pcall(function()
          c:lock(H.key("durability-own"), { ttl = 6 }):try_acquire()
        end)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("max_ttl of 5000 ms", 1, true), err)
        c:close()
        c = assert(leaselock.connect(with_options(table_opt .. "&max_ttl=2s")))
        assert.equals(5, c:durability().max_ttl) -- never lowered
        c:close()
      end)
    end
  end)
end

describe("observability", function()
  local uri = H.backends()[1].uri

  it("sends the client's events to its log function, at its level", function()
    local c = assert(leaselock.connect(uri))
    local other = assert(leaselock.connect(uri))
    local seen = {}
    assert.is_true(c:set_log(function(ev) seen[#seen + 1] = ev end, 10))
    local key = H.key("log")
    local held = assert(other:lock(key):try_acquire())
    local lock = c:lock(key, { ttl = 5 })
    local l, msg, code = lock:try_acquire()
    assert.is_nil(l)
    assert.equals("BUSY", code)
    assert.equals("busy", seen[1].event)
    assert.equals(10, seen[1].level)
    assert.equals("DEBUG", seen[1].levelname)
    assert.equals(key, seen[1].key)
    assert(held:release())
    l = assert(lock:acquire({ timeout = 0 }))
    assert.equals("acquire", seen[2].event)
    assert.equals(l.fence, seen[2].fence)
    assert.is_true(l:release())
    assert.is_true(l.held == false)
    assert.equals("release", seen[3].event)
    -- Below the level: nothing; nil turns it off.
    c:set_log(function(ev) seen[#seen + 1] = ev end, 30)
    l = assert(lock:try_acquire())
    l:release()
    assert.equals(3, #seen)
    c:set_log(nil)
    c:close()
    other:close()
  end)

  it("sends a loss to the log function at ERROR (ngx.log style)", function()
    local c = assert(leaselock.connect(uri))
    local other = assert(leaselock.connect(uri))
    local lines = {}
    c:set_log(function(ev)
      lines[#lines + 1] = { ev.level >= 40 and "ERR" or "WARN", ev.event, ev.key, ev.message }
    end, 30)
    local key = H.key("log-loss")
    local l = assert(c:lock(key, { ttl = 0.6 }):try_acquire())
    assert(other:force_release(key))
    H.sleep(1.0)
    assert.is_true(l.lost)
    assert.equals("ERR", lines[1][1])
    assert.equals("lost", lines[1][2])
    assert.equals(key, lines[1][3])
    assert.is_true(c:stats().losses == 1)
    c:close()
    other:close()
  end)

  it("counts in client:stats() and renders Prometheus text", function()
    local c = assert(leaselock.connect(uri))
    local key = H.key("stats")
    local l = assert(c:lock(key):try_acquire())
    assert.equals(1, c:stats().leases_held)
    assert(l:release())
    local s = c:stats()
    assert.equals(1, s.acquires)
    assert.equals(1, s.releases)
    assert.equals(0, s.leases_held)
    assert.is_true(s.requests >= 2)
    local n = 0
    for _, b in ipairs(s.latency_buckets) do n = n + b.count end
    assert.equals(s.requests, n)
    assert.equals(math.huge, s.latency_buckets[#s.latency_buckets].le)
    local text = c:prometheus('app="lua"')
    assert.truthy(text:find('leaselock_acquires_total{app="lua"} 1\n', 1, true))
    c:close()
    assert.equals(1, c:stats().acquires) -- still readable once closed
  end)

  it("calls on_renew_failed on the Lua thread while the lease is still held", function()
    local path = uri:gsub("^sqlite://", "")
    local c = assert(leaselock.connect(uri .. "?busy_timeout_ms=20"))
    local calls = {}
    local key = H.key("renew-failed")
    local lock = c:lock(key, { ttl = 3, on_renew_failed = function(lease, msg, code, left)
      calls[#calls + 1] = { lease.held, msg, code, left }
    end })
    local l = assert(lock:try_acquire())
    -- Another connection holds the database for 1.6 s: renewals (at 1 s,
    -- then every 0.3 s) fail with SQLite busy until it lets go.
    os.execute(("python3 -c \"import sqlite3,time; c=sqlite3.connect('%s', isolation_level=None); "
      .. "c.execute('BEGIN EXCLUSIVE'); time.sleep(1.6)\" &"):format(path))
    H.sleep(1.4)
    assert.is_true(l.held)
    H.sleep(1.0)
    assert.is_true(l.held)
    assert.is_true(#calls >= 1)
    assert.equals("BACKEND", calls[1][3])
    assert.is_true(calls[1][4] > 0 and calls[1][4] < 3)
    local s = c:stats()
    assert.is_true(s.renewal_failures >= 1 and s.renewals >= 1)
    assert(l:release())
    c:close()
  end)

  it("refuses a log function that is not one", function()
    local c = assert(leaselock.connect(uri))
    assert.has_error(function() c:set_log(42) end)
    assert.has_error(function() c:lock("k", { on_renew_failed = 1 }) end)
    c:close()
  end)
end)

-- lease:renew([ttl [, min_hold]]): a renew that also extends the minimum
-- hold, counted from the renew; it never shortens one given before.
for _, backend in ipairs(H.backends()) do
  describe("renew with min_hold on " .. backend.name, function()
    local client, other

    setup(function()
      client = assert(leaselock.connect(backend.uri, { label = "busted-extend" }))
      other = assert(leaselock.connect(backend.uri, { label = "busted-extend-other" }))
    end)

    teardown(function()
      client:close()
      other:close()
    end)

    it("keeps the key taken min_hold after the renew", function()
      local k = H.key("extend")
      local l = assert(client:lock(k, { ttl = 10 }):try_acquire())
      H.sleep(0.3)
      assert.is_true(l:renew(nil, 3))
      assert.is_true(l:release())
      local left = assert(other:info(k)).expires_in
      assert.is_true(left > 2.0 and left <= 3.1, "left " .. tostring(left))
      assert.is_nil(other:lock(k):try_acquire())
    end)

    it("never shortens a minimum hold", function()
      local k = H.key("extend2")
      local l = assert(client:lock(k, { ttl = 10, min_hold = 3 }):try_acquire())
      assert.is_true(l:renew(4, 0))
      assert.is_true(l:release())
      local left = assert(other:info(k)).expires_in
      assert.is_true(left > 2.0 and left <= 3.0, "left " .. tostring(left))
    end)

    it("raises for a bad min_hold", function()
      local l = assert(client:lock(H.key("extend3"), { ttl = 10 }):try_acquire())
      local ok, err = pcall(l.renew, l, nil, -1)
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'renew' %(min_hold", err)
      assert.is_true(l.held)
      assert.is_true(l:release())
    end)
  end)
end

-- Counting semaphores and read-write locks: lock objects whose acquires
-- each take a lease on a record of their own beside the key.
for _, backend in ipairs(H.backends()) do
  describe("semaphores and read-write locks on " .. backend.name, function()
    local client, admin

    setup(function()
      client = assert(leaselock.connect(backend.uri, { label = "busted-modes" }))
      -- another owner: a coroutine asking through its own client for what
      -- it holds would wait for itself (refused)
      admin = assert(leaselock.connect(backend.uri))
    end)

    teardown(function()
      client:close()
      admin:close()
    end)

    it("lets limit holders in, answers BUSY, then TIMEOUT, and frees a slot on release", function()
      local key = H.key("sem")
      local sem = client:semaphore(key, { limit = 2, ttl = 10 })
      assert.equals("semaphore", sem.mode)
      assert.equals(2, sem.limit)
      assert.equals(key, sem.key)
      local a = assert(sem:try_acquire())
      -- the same coroutine may take another slot: that is what it counts
      local b = assert(sem:acquire { timeout = 5 })
      assert.are_not.equal(a.owner, b.owner)
      assert.matches("^" .. key:gsub("%p", "%%%0") .. "/%.slot/%d+$", a.key)
      assert.are_not.equal(a.key, b.key)
      local none, msg, code = client:semaphore(key, { limit = 2 }):try_acquire()
      assert.is_nil(none)
      assert.equals("busy", msg)
      assert.equals("BUSY", code)
      local t0 = os.time()
      local late, tmsg, tcode = sem:acquire { timeout = 0.3 }
      assert.is_nil(late)
      assert.is_string(tmsg)
      assert.equals("TIMEOUT", tcode)
      assert.is_true(os.time() - t0 < 5)
      assert.is_true(a:release())
      local c = assert(sem:try_acquire())
      assert.is_true(c.held)
      b:release()
      c:release()
    end)

    it("counts a holder of a larger limit against a smaller one", function()
      local key = H.key("sem-lower")
      local a = assert(client:semaphore(key, { limit = 3 }):try_acquire())
      local b = assert(client:semaphore(key, { limit = 3 }):try_acquire())
      local none, _, code = client:semaphore(key, { limit = 2 }):try_acquire()
      assert.is_nil(none)
      assert.equals("BUSY", code)
      a:release()
      b:release()
    end)

    it("runs with inside a slot and releases it after, also on error", function()
      local key = H.key("sem-with")
      local sem = client:semaphore(key, { limit = 1 })
      local seen
      local r1, r2 = sem:with(function(lease)
        seen = lease
        assert.is_true(lease.held)
        local _, _, code = sem:try_acquire()
        assert.equals("BUSY", code)
        return "x", 7
      end, { timeout = 5 })
      assert.equals("x", r1)
      assert.equals(7, r2)
      assert.is_false(seen.held)
      assert.has_error(function()
        sem:with(function()
          error("boom", 0)
        end)
      end, "boom")
      local again = assert(sem:try_acquire())
      again:release()
    end)

    if is54 then
      it("releases a slot's lease by <close>", function()
        local key = H.key("sem-close")
        local sem = client:semaphore(key, { limit = 1 })
        local chunk = assert(load([[
          local sem = ...
          do
            local lease <close> = assert(sem:try_acquire())
            assert(lease.held)
          end
        ]]))
        chunk(sem)
        local l = assert(sem:try_acquire())
        l:release()
      end)
    end

    it("names each holder's record in lease.key, at the longest keys", function()
      -- a mode's lease handle holds its record's key, longer than the lock's
      local long = H.key("long-") .. "/"
      for _, lock in ipairs {
        client:semaphore(long .. ("s"):rep(245 - #long), { limit = 2 }),
        client:rwlock(long .. ("r"):rep(216 - #long)).shared,
        client:rwlock(long .. ("w"):rep(216 - #long)).exclusive,
        client:lock(long .. ("p"):rep(255 - #long)),
      } do
        local lease = assert(lock:try_acquire())
        assert.equals(lock.key, lease.key:sub(1, #lock.key))
        assert.equals(lease.owner, assert(admin:info(lease.key)).owner)
        local key = lease.key
        lease:release()
        local closed = assert(lock:with(function(l)
          assert.equals(#key, #l.key)
          return l
        end))
        assert.equals(lock.key, closed.key:sub(1, #lock.key)) -- read once closed
        assert.equals(#key, #closed.key)
      end
    end)

    it("lets readers share and keeps a writer out while they hold", function()
      local key = H.key("rw")
      local rw = client:rwlock(key, { ttl = 10 })
      assert.equals(key, rw.key)
      assert.equals("shared", rw.shared.mode)
      assert.equals("exclusive", rw.exclusive.mode)
      local r1 = assert(rw.shared:try_acquire())
      local r2 = assert(client:rwlock(key).shared:acquire { timeout = 5 })
      assert.are_not.equal(r1.key, r2.key)
      assert.matches("/%.rw/r/%x+$", r1.key)
      -- (a writer of another client: this coroutine's would wait for itself)
      local w, _, code = admin:rwlock(key).exclusive:try_acquire()
      assert.is_nil(w)
      assert.equals("BUSY", code)
      local w2, _, tcode = admin:rwlock(key).exclusive:acquire { timeout = 0.3 }
      assert.is_nil(w2)
      assert.equals("TIMEOUT", tcode)
      r1:release()
      r2:release()
      local w3 = assert(rw.exclusive:acquire { timeout = 5 })
      assert.matches("/%.rw/w$", w3.key)
      w3:release()
    end)

    it("keeps readers and other writers out while a writer holds", function()
      local key = H.key("rw-w")
      local rw = client:rwlock(key)
      local w = assert(rw.exclusive:try_acquire())
      -- (another client's: this coroutine's would wait for itself)
      local _, _, code = admin:rwlock(key).shared:try_acquire()
      assert.equals("BUSY", code)
      local _, _, tcode = admin:rwlock(key).shared:acquire { timeout = 0.3 }
      assert.equals("TIMEOUT", tcode)
      local _, _, wcode = admin:rwlock(key).exclusive:try_acquire()
      assert.equals("BUSY", wcode)
      -- asked again by its holder: it would wait for itself
      local ok, err = pcall(rw.exclusive.try_acquire, rw.exclusive)
      assert.is_false(ok)
      assert.matches("already held by this coroutine through this lock %(the exclusive side", err)
      local r = admin:rwlock(key).exclusive:with(function() end, { timeout = 0 })
      assert.is_nil(r)
      w:release()
      local got = rw.shared:with(function(lease)
        return lease.held
      end)
      assert.is_true(got)
    end)

    it("does not starve a waiting writer: new readers wait behind it", function()
      local key = H.key("rw-starve")
      local r1 = assert(client:rwlock(key).shared:try_acquire())
      -- the writer waits in another process (an acquire blocks its thread)
      local child = H.spawn(([[
        local c = assert(require("leaselock").connect(%q))
        local w = assert(c:rwlock(%q).exclusive:acquire { timeout = 20 })
        io.write(w.key, "\n"); io.flush()
        assert(w:release())
      ]]):format(backend.uri, key))
      local waiting = false
      for _ = 1, 400 do
        local rec = client:info(key .. "/.rw/w")
        if rec and rec.owner and rec.expires_in > 0 then
          waiting = true
          break
        end
        H.sleep(0.05)
      end
      assert.is_true(waiting)
      local r2, _, code = client:rwlock(key).shared:try_acquire()
      assert.is_nil(r2)
      assert.equals("BUSY", code)
      r1:release()
      assert.equals(key .. "/.rw/w", child:read("*l"))
      child:close()
      local r3 = assert(client:rwlock(key).shared:acquire { timeout = 10 })
      r3:release()
    end)

    it("takes slots and sides in fair mode, with min_hold", function()
      local key = H.key("sem-fair")
      local sem = client:semaphore(key, { limit = 1, fair = true, min_hold = 0.3 })
      local a = assert(sem:acquire { timeout = 5 })
      assert.is_true(a:release())
      -- min_hold keeps the slot after the release
      local _, _, code = sem:try_acquire()
      assert.equals("BUSY", code)
      local b = assert(sem:acquire { timeout = 5 })
      assert.is_true(b.fence > a.fence)
      b:release()
      local w = assert(client:rwlock(H.key("rw-fair"), { fair = true }).exclusive:acquire { timeout = 5 })
      w:release()
    end)

    it("refuses acquire_nb on a mode lock with a clear error", function()
      local sem = client:semaphore(H.key("sem-nb"), { limit = 1 })
      local ok, err = pcall(sem.acquire_nb, sem, {
        timeout = 0,
        sleep = function() end,
      })
      assert.is_false(ok)
      assert.matches("acquire_nb: not offered for semaphores and read%-write locks", err)
    end)
  end)
end

describe("semaphore and rwlock arguments", function()
  local client

  setup(function()
    client = assert(leaselock.connect(H.backends()[1].uri))
  end)

  teardown(function()
    client:close()
  end)

  local function bad(pattern, f)
    local ok, err = pcall(f)
    assert.is_false(ok)
    assert.matches(pattern, err)
  end

  it("checks limit", function()
    bad("bad argument #2 to 'semaphore' %(limit is required", function()
      client:semaphore("k")
    end)
    bad("bad argument #2 to 'semaphore' %(limit must be an integer from 1 to 1000, got nil", function()
      client:semaphore("k", { ttl = 1 })
    end)
    bad("limit must be an integer from 1 to 1000, got string", function()
      client:semaphore("k", { limit = "2" })
    end)
    for _, v in ipairs({ 0, -1, 1001, 1.5, math.huge }) do
      bad("bad argument #2 to 'semaphore' %(limit must be an integer from 1 to 1000", function()
        client:semaphore("k", { limit = v })
      end)
    end
    assert.equals(1000, client:semaphore("k", { limit = 1000 }).limit)
  end)

  it("refuses reentrant, unknown options and bad option values", function()
    bad("bad argument #2 to 'semaphore' %(reentrant is not offered for a semaphore", function()
      client:semaphore("k", { limit = 2, reentrant = true })
    end)
    bad("bad argument #2 to 'rwlock' %(reentrant is not offered for a read%-write lock", function()
      client:rwlock("k", { reentrant = false })
    end)
    bad("bad argument #2 to 'rwlock' %(unknown option 'limit'", function()
      client:rwlock("k", { limit = 2 })
    end)
    bad("bad argument #2 to 'semaphore' %(ttl", function()
      client:semaphore("k", { limit = 2, ttl = -1 })
    end)
    bad("bad argument #2 to 'rwlock' %(fair must be a boolean", function()
      client:rwlock("k", { fair = 1 })
    end)
    bad("bad argument #2 to 'rwlock' %(on_lost must be a function", function()
      client:rwlock("k", { on_lost = 1 })
    end)
  end)

  it("checks the key, with room for the records' suffixes", function()
    bad("bad argument #1 to 'semaphore' %(key: string expected", function()
      client:semaphore(nil, { limit = 1 })
    end)
    bad("bad argument #1 to 'semaphore' %(key must be at most 245 bytes", function()
      client:semaphore(("x"):rep(246), { limit = 1 })
    end)
    bad("bad argument #1 to 'rwlock' %(key must be at most 216 bytes", function()
      client:rwlock(("x"):rep(217))
    end)
    assert.is_table(client:rwlock(("x"):rep(216)))
    bad("bad argument #1 to 'acquire' %(options", function()
      client:semaphore("k", { limit = 1 }):acquire(5)
    end)
  end)
end)
