/*
 * cli.h - what the files of the leaselock command line tool share. The tool
 * uses the public API (leaselock.h) only.
 *
 *   main.c       the options before the command, dispatch to the commands
 *   help.c       the usage and help text (--help)
 *   output.c     messages, exit statuses of failed calls, durations, text, JSON
 *   options.c    options, durations, the arguments of each command
 *   client.c     opening a client (every command)
 *   admin.c      status, list, release --force, prune
 *   view.c       a lock (a mode's records as one) as status, list and top show it
 *   top.c        top: the live view of the locks (ANSI escapes, termios)
 *   run.c        run: signals, acquire, exit status (and its design note)
 *   reenter.c    run --reentrant inside a run of the same KEY
 *   spawn.c      run: starting the command
 *   watchdog.c   run: the watchdog process and its CLOCK_BOOTTIME timer
 *   supervise.c  run: while the command runs
 *
 * Ownership: every pointer a function takes is borrowed for the call unless
 * its line below says otherwise; strings from options point into argv.
 */
#ifndef LEASELOCK_CLI_H
#define LEASELOCK_CLI_H

#include "leaselock.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>

/* Exit statuses (printed by --help, documented in docs/cli.md). */
enum
{
   EXIT_HELD_OK = 0,
   EXIT_FREE = 1,      /* status: no live lease on the key */
   EXIT_NO_RECORD = 2, /* status: the key has never been acquired */
   EXIT_USAGE = 64,    /* EX_USAGE: bad option, duration, key or URI */
   EXIT_BACKEND = 69,  /* EX_UNAVAILABLE: database unreachable, backend not built */
   EXIT_INTERNAL = 70, /* EX_SOFTWARE: out of memory, cannot set up signal handling,
                        * cannot start the command or its watchdog */
   EXIT_BUSY = 75,     /* EX_TEMPFAIL: held by another owner / --wait ran out
                        * (run's default; --conflict-exit-code changes it) */
   EXIT_LOST = 76,     /* the lease was lost while the command ran */
   EXIT_CANNOT_EXEC = 126,
   EXIT_NOT_FOUND = 127,
};

/* What a parser returns when all arguments were read (any other value is
 * the exit status to return at once). */
#define PARSED (-1)

#if defined(__GNUC__)
#define PRINTF_LIKE __attribute__ ((format (printf, 1, 2)))
#else
#define PRINTF_LIKE
#endif

/* ---- help.c ----------------------------------------------------------- */

/* Prints the usage and the help on stdout; returns 0. */
int print_help (void);

/* ---- output.c --------------------------------------------------------- */

/* "leaselock" or "leaselock SUBCOMMAND", the prefix of every message: a
 * static string, set once by main. */
extern const char *cmd_name;

/* --verbose: every client's log events go to stderr (print_log_event). */
extern bool verbose;
/* A leaselock_log_cb: "cmd_name: LEVEL event "key" (fence N): message". */
void print_log_event (const leaselock_log_event_t *ev, void *user_data);

/* Prints "cmd_name: message" on stderr. */
void say (const char *fmt, ...) PRINTF_LIKE;
/* Prints the message and a hint; returns EXIT_USAGE. */
int usage_error (const char *fmt, ...) PRINTF_LIKE;
/* Prints "what: CODE: message"; returns the exit status for err. */
int fail (const char *what, const leaselock_error_t *err);

/* Write into the caller's buf (32 bytes hold any duration). */
void fmt_ms (int64_t ms, char *buf, size_t size);
void fmt_limit (int64_t ms, char *buf, size_t size);

void put_text (FILE *f, const char *s, size_t len);
/* A static string. */
const char *record_state (const leaselock_record_t *r);
void put_record_json (FILE *f, const leaselock_record_t *r);
void put_holder (FILE *f, const leaselock_record_t *r);
/* s as a JSON string (bytes that are not UTF-8 become U+FFFD). */
void put_json_string (FILE *f, const char *s, size_t len);

/* ---- top.c ------------------------------------------------------------ */

/* leaselock top: the locks of the database, refreshed (or once). */
int cmd_top (const char *uri, int argc, char **argv);

/* ---- view.c: a lock as status, list and top show it ------------------- */

/* The record that stands for the lock (a lock's own, a read-write lock's
 * writer, else the first holder; NULL when none). */
const leaselock_record_t *lock_lead (const leaselock_lock_info_t *l);
/* "lock", "semaphore", "rwlock" (static). */
const char *lock_mode_name (leaselock_lock_mode_t m);
/* Whether r's holder is a process of this host that no longer exists. */
bool holder_dead (const leaselock_record_t *r);
/* "next <owner>, N queued", "none" or "unknown" into buf. */
void fmt_waiters (const leaselock_lock_info_t *l, char *buf, size_t size);
/* The lock as one JSON object (with dead: whether each holder is dead). */
void put_lock_json (FILE *f, const leaselock_lock_info_t *l);
/* status: one field a line. */
void put_lock_lines (FILE *f, const leaselock_lock_info_t *l);
/* list: one line, and a line per holder of a mode. */
void put_lock_list_lines (FILE *f, const leaselock_lock_info_t *l);

/* ---- options.c -------------------------------------------------------- */

/* run's options. Every pointer points into argv, except label, which may
 * point into label_buf: a run_opts_t stays where parse_run filled it. */
typedef struct run_opts
{
   const char *uri, *key, *label;
   char **cmd;
   int64_t ttl_ms, wait_ms, min_hold_ms, grace_ms;
   const char *ttl_text, *grace_text; /* as typed; grace_text NULL: default */
   bool quiet;                        /* -q: a busy run prints nothing */
   bool fair;                         /* --fair: wait in order of arrival */
   bool reentrant;                    /* --reentrant: enter a lease held around us */
   int64_t slots;                     /* --slots N: a semaphore of N slots on KEY (0: not) */
   int rw;                            /* --shared, --exclusive: LEASELOCK_SHARED/EXCLUSIVE */
   int conflict_exit;                 /* -E: the exit status when busy (default EXIT_BUSY) */
   char label_buf[LEASELOCK_KEY_MAX + 1];
} run_opts_t;

bool is_help (const char *a);
/* "--name VALUE" or "--name=VALUE" at argv[*i]: 1 (*value set, *i past
 * it), 0 another argument, -1 the value is missing (message printed). */
int opt_value (int argc, char **argv, int *i, const char *name, const char **value);
/* A duration option within [min, max] ms; prints and returns false on error. */
bool parse_ms (const char *opt, const char *text, int64_t min, int64_t max, int64_t *out);
/* --uri at argv[*i]: 1 matched (*uri points into argv), 0 not, -1 error. */
int opt_uri (int argc, char **argv, int *i, const char **uri);

/* What status, list and release were given: pointers into argv (uri may
 * also be the caller's default). */
typedef struct admin_args
{
   const char *uri;
   const char *arg; /* KEY or PREFIX; NULL: none */
   bool flag;       /* --json, or release's --force */
   bool verbose;    /* status -v: the durability lines too */
   bool held;       /* list --held: held keys only */
} admin_args_t;

int parse_admin_args (int argc, char **argv, const char *flag, const char *flag2, bool verbose_ok,
                      const char *takes, admin_args_t *a);

/* What prune was given: pointers into argv (uri may also be the caller's
 * default). */
typedef struct prune_args
{
   const char *uri;
   const char *prefix; /* NULL: every key */
   int64_t older_than_ms;
} prune_args_t;

int parse_prune_args (int argc, char **argv, prune_args_t *a);
int parse_run (const char *uri, int argc, char **argv, run_opts_t *o);
int64_t kill_margin_ms (int64_t ttl_ms);

/* ---- client.c --------------------------------------------------------- */

/* A new client for the caller to destroy (its log on stderr under
 * --verbose), or NULL with the message printed and *status set. */
leaselock_client_t *open_client (const char *uri, const char *label, int *status);
/* Prints "database:   URI" (the client's) on out: the text forms of status
 * and list say which database they read. */
void put_database (FILE *out, leaselock_client_t *client);

/* ---- admin.c ---------------------------------------------------------- */

int cmd_status (const char *uri, int argc, char **argv);
int cmd_list (const char *uri, int argc, char **argv);
int cmd_release (const char *uri, int argc, char **argv);
int cmd_prune (const char *uri, int argc, char **argv);

/* ---- run.c ------------------------------------------------------------ */

int cmd_run (const char *uri, int argc, char **argv);

/* The signals run waits for, and the loss pipe: descriptors that
 * signals_close (run.c) closes. */
typedef struct run_signals
{
   int sigfd;          /* the forwarded signals and SIGCHLD */
   int lost_pipe[2];   /* written by on_lost */
   sigset_t orig_mask; /* the mask leaselock started with, for the command */
} run_signals_t;

/* The command and its watchdog. It owns watch_fd and timer_fd: watchdog_done
 * and close_fd end them. The command is reaped by whoever sees it end (then
 * pid is -1); the watchdog is never waited for: it ends on its own. */
typedef struct child
{
   pid_t pid;      /* the command, -1 before it starts */
   pid_t target;   /* where signals go: -pid (its own process group) or pid */
   pid_t watchdog; /* -1: none */
   int watch_fd;   /* our end of the watchdog's socket: 'X' = done, EOF = we died */
   int timer_fd;   /* CLOCK_BOOTTIME timer shared with the watchdog: its SIGKILL */
} child_t;

static inline void close_fd (int *fd)
{
   if (*fd >= 0)
      close (*fd);
   *fd = -1;
}

/* ---- reenter.c -------------------------------------------------------- */

/* run --reentrant inside a command that a run of the same KEY supervises:
 * true when it ran CMD under one more hold of that lease (*status: run's
 * exit status); false when this is no such run (none around, another key,
 * or that lease is not held on this database), and a run of its own
 * follows. */
bool run_reentered (const run_opts_t *o, int *status);

/* What kind of holder run o is, as its command sees it in LEASELOCK_MODE:
 * "lock", "slots", "shared" or "exclusive" (a static string). */
const char *run_mode_name (const run_opts_t *o);

/* ---- spawn.c ---------------------------------------------------------- */

/* Starts o->cmd into ch (see the function). On failure the command, if it
 * was forked, is reaped; ch's descriptors stay the caller's to close. */
bool start_command (const run_opts_t *o, leaselock_lease_t *lease, const sigset_t *mask,
                    child_t *ch, int *status);

/* ---- watchdog.c ------------------------------------------------------- */

int64_t mono_ms (void);
/* Forks the watchdog; ch gets its descriptors (see child_t). */
bool start_watchdog (child_t *ch, leaselock_lease_t *lease, int64_t margin);
void arm_watchdog (const child_t *ch, int64_t at_mono);
void watchdog_done (child_t *ch);

/* ---- supervise.c ------------------------------------------------------ */

/* What supervise works with: it borrows everything it points to. */
typedef struct supervisor
{
   const run_opts_t *o;
   leaselock_lease_t *lease;
   const run_signals_t *sig;
   child_t *ch;
   int64_t margin;   /* kill_margin_ms */
   int64_t deadline; /* the lease's local deadline as last seen (monotonic ms) */
   int64_t armed;    /* the watchdog's timer (monotonic ms) */
   int64_t kill_at;  /* when SIGKILL is due, once stopping */
   bool stopping, killed, internal_error;
   int wstatus;
} supervisor_t;

void supervise (supervisor_t *sv);

#endif /* LEASELOCK_CLI_H */
