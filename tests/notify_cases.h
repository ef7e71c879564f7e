/*
 * notify_cases.h - hand-off by notification (watch.c), for the suites of
 * the backends that can notify (test_sqlite.c, test_sql.c on PostgreSQL),
 * which link notify_cases.c.
 *
 * Real processes: one holds a key and releases it when the other is
 * waiting; the waiter's polls are made longer than its timeout
 * (ll_test_wait_poll_ms), so only a notification can wake it in time.
 * No timing is asserted: a missing wake-up shows as a TIMEOUT.
 *
 * The suite that links it defines:
 *   nt_break_listener (uri)  cuts the waiting client's listener as a
 *                            failure would (the channel gone, the listener's
 *                            connection killed)
 *   nt_listeners ()          how many listeners the server sees (-1: cannot
 *                            tell), for the idle test
 *   nt_wake_path (uri, buf, size)  the backend's channel file for uri
 *                            (wake_file.c) into buf; false when it has none
 *
 * Every case opens and destroys its own clients; nothing is kept between
 * calls.
 */
#ifndef LL_NOTIFY_CASES_H
#define LL_NOTIFY_CASES_H

#include "testlib.h"

/* Defined by the suite (see above). */
void nt_break_listener (const char *uri);
int nt_listeners (void);
bool nt_wake_path (const char *uri, char *buf, size_t size);

/* For the suites: the same-machine channel of a server backend
 * (ll_wake_host_path) into buf; and uri's channel file (nt_wake_path)
 * removed, false when the backend has none. */
bool nt_host_wake_path (const char *uri, const char *backend, const char *table_option, char *buf,
                        size_t size);
bool nt_remove_wake (const char *uri);

/* A release in another process wakes the waiter at once: its polls are
 * longer than its timeout, and it sends a few statements, not dozens. */
void test_notify_wakes_other_process (void);

/* A lost notification only delays the waiter to its next poll, and the
 * listener comes back. */
void test_notify_lost_then_poll (void);

/* A forked child's waits are woken through a listener of its own (the
 * parent's is not used in the child). */
void test_notify_fork_child (void);

/* A client that never waits opens no listener and starts no thread. */
void test_notify_idle_costs_nothing (void);

/* A release notifies only when it leaves a waiter next (a live
 * reservation): releases nobody waits for wake no process's watcher, and
 * the one a waiter is next for wakes it. */
void test_notify_only_when_reserved (void);
void test_notify_only_next_owners_listener (void);
void test_notify_fair_queue_handoffs (void);
/* Where queue leaves notify: the waiter a new holder's leave brings to
 * the head claims the reservation during that hold. */
void test_notify_fair_next_claims_while_held (void);
/* And when that leave went unheard (its listener opened after it). */
void test_notify_fair_leave_before_listening (void);
/* And a leave heard while a waiter's count was on its way still counts. */
void test_notify_fair_leave_during_count (void);

/* A listener that hears only this machine's releases (watch_local_only:
 * MySQL, MongoDB) leaves the next owner on the quarter rule: its watcher
 * never reports a listener that hears every release, and a release that
 * touches no channel (another machine's) is still found by a poll. */
void test_notify_local_only_polls (void);

/* Anything but a regular file at the channel's name (a FIFO, which
 * would block an open for writing until a reader came) is refused,
 * logged once, and nothing hangs: waiters poll. */
void test_notify_wake_fifo_refused (void);

/* RUNs the cases above on URI (each returns at once where the backend
 * cannot notify, or where the case does not apply). */
void notify_cases_run (void);

#endif /* LL_NOTIFY_CASES_H */
