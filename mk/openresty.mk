# OpenResty: nginx with its Lua module loading the LuaJIT build of the
# module (mk/lua.mk), a lease per request via ngx.run_worker_thread; then
# lock:acquire_nb waits (ngx.sleep; a server's tries in a thread pool)
# while the same worker answers others, on SQLite and each server (run it
# under tests/with-servers.sh).
#
#   make test-openresty

TEST_SUITES += openresty
.PHONY: test-openresty

test-openresty: $$(LUAJIT_MOD)
	@bash tests/lua/openresty/test_openresty.sh $(abspath $(LUAJIT_MOD))
