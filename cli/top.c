/*
 * top.c - leaselock top: the locks of a database in a terminal, refreshed
 * every --interval (one leaselock_locks call each), sortable by any
 * column and filtered by a key prefix; --once prints one table, --json one
 * JSON array (per interval without --once). Plain ANSI escapes and
 * termios, no curses: the alternate screen, the cursor hidden, the
 * terminal's modes restored on every way out (q, Ctrl-C, SIGTERM, SIGHUP).
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

/* One lock, copied out of the callback. */
typedef struct top_row
{
   char key[LEASELOCK_KEY_MAX + 1];
   const char *mode, *state;
   char holder[300];
   bool dead;
   int64_t fence, held_ms, left_ms, holds, queued, live;
   char waiters[64];
} top_row_t;

typedef struct top_rows
{
   top_row_t *r;
   size_t n, cap;
   bool failed, json, once;
   size_t json_count;
} top_rows_t;

enum
{
   COL_KEY,
   COL_MODE,
   COL_HOLDER,
   COL_FENCE,
   COL_SINCE,
   COL_LEFT,
   COL_HOLDS,
   COL_WAITERS,
   N_COLS
};
static const char *const col_names[N_COLS] = { "KEY",  "MODE", "HOLDER", "FENCE",
                                               "HELD", "LEFT", "HOLDS",  "WAITERS" };

/* What the screen shows; set by keys. */
typedef struct top_view
{
   int sort;
   bool reverse;
   char prefix[LEASELOCK_KEY_MAX + 1];
   bool editing; /* the prefix is being typed */
   char typed[LEASELOCK_KEY_MAX + 1];
} top_view_t;

static volatile sig_atomic_t got_signal, got_winch;

static void on_signal (int sig)
{
   if (sig == SIGWINCH)
      got_winch = 1;
   else
      got_signal = sig;
}

/* The holder column: "host pid N (label)", "+K" for a mode's other holders. */
static void holder_text (const leaselock_lock_info_t *l, const leaselock_record_t *lead,
                         top_row_t *row)
{
   row->holder[0] = '\0';
   if (!lead || !lead->owner[0] || lead->expires_in_ms <= 0)
      return;
   int n = snprintf (row->holder, sizeof row->holder, "%.64s pid %" PRId64, lead->host, lead->pid);
   if (lead->label[0] && n > 0 && (size_t)n < sizeof row->holder)
      n += snprintf (row->holder + n, sizeof row->holder - n, " (%.64s)", lead->label);
   if (l->n_holders > 1 && n > 0 && (size_t)n < sizeof row->holder)
      snprintf (row->holder + n, sizeof row->holder - n, " +%zu", l->n_holders - 1);
   row->dead = holder_dead (lead);
}

static bool row_add (const leaselock_lock_info_t *l, void *user_data)
{
   top_rows_t *rows = user_data;
   if (rows->json) {
      fputs (rows->json_count++ ? ",\n" : "\n", stdout);
      put_lock_json (stdout, l);
      return true;
   }
   if (rows->n == rows->cap) {
      size_t cap = rows->cap ? 2 * rows->cap : 64;
      top_row_t *grown = realloc (rows->r, cap * sizeof *grown);
      if (!grown) {
         rows->failed = true;
         return false;
      }
      rows->r = grown;
      rows->cap = cap;
   }
   top_row_t *row = &rows->r[rows->n++];
   const leaselock_record_t *lead = lock_lead (l);
   memset (row, 0, sizeof *row);
   memcpy (row->key, l->key, l->key_len);
   row->mode = lock_mode_name (l->mode);
   row->state = l->state;
   holder_text (l, lead, row);
   row->fence = lead ? lead->fence : 0;
   row->held_ms = lead && lead->owner[0] ? lead->held_ms : -1;
   row->left_ms = lead ? lead->expires_in_ms : 0;
   row->holds = lead ? lead->holds : 0;
   row->queued = l->queued;
   row->live = l->live;
   fmt_waiters (l, row->waiters, sizeof row->waiters);
   return true;
}

static int sort_col, sort_sign; /* for qsort's comparison */

/* Where each numeric column's value is in a row (0 for the others: the
 * key, not a number, is at 0). */
static const size_t col_num[N_COLS] = { [COL_FENCE] = offsetof (top_row_t, fence),
                                        [COL_SINCE] = offsetof (top_row_t, held_ms),
                                        [COL_LEFT] = offsetof (top_row_t, left_ms),
                                        [COL_HOLDS] = offsetof (top_row_t, holds),
                                        [COL_WAITERS] = offsetof (top_row_t, queued) };

static int64_t row_num (const top_row_t *r, int col)
{
   return *(const int64_t *)((const char *)r + col_num[col]);
}

static int row_cmp (const void *a_, const void *b_)
{
   const top_row_t *a = a_, *b = b_;
   int c = 0;
   if (sort_col == COL_MODE) {
      c = strcmp (a->mode, b->mode);
   } else if (sort_col == COL_HOLDER) {
      c = strcmp (a->holder, b->holder);
   } else if (col_num[sort_col]) {
      int64_t x = row_num (a, sort_col), y = row_num (b, sort_col);
      c = x < y ? -1 : x > y;
   }
   if (c == 0)
      c = strcmp (a->key, b->key);
   return c * sort_sign;
}

/* Reads the locks under prefix into rows (sorted by view). */
static bool top_read (leaselock_client_t *client, const char *prefix, const top_view_t *view,
                      top_rows_t *rows, leaselock_error_t *err)
{
   rows->n = 0;
   rows->failed = false;
   if (!leaselock_locks (client, prefix, strlen (prefix), row_add, rows, err))
      return false;
   if (rows->failed) {
      err->code = LEASELOCK_NOMEM;
      snprintf (err->message, sizeof err->message, "out of memory");
      return false;
   }
   sort_col = view->sort;
   sort_sign = view->reverse ? -1 : 1;
   if (rows->n > 1)
      qsort (rows->r, rows->n, sizeof *rows->r, row_cmp);
   return true;
}

/* One cell: a duration, or "-". */
static void fmt_cell_ms (int64_t ms, char *buf, size_t size)
{
   if (ms < 0)
      snprintf (buf, size, "-");
   else
      fmt_ms (ms, buf, size);
}

/* One row of the table (or its header when row is NULL), cut at width
 * columns (0: no limit), ending with "\r\n" on a terminal. */
static void put_row (const top_row_t *row, int width, const char *eol)
{
   char line[2048], held[32], left[32];
   if (!row) {
      snprintf (line, sizeof line, "%-24s %-9s %-8s %-34s %6s %8s %8s %5s %s", col_names[COL_KEY],
                col_names[COL_MODE], "STATE", col_names[COL_HOLDER], col_names[COL_FENCE],
                col_names[COL_SINCE], col_names[COL_LEFT], col_names[COL_HOLDS],
                col_names[COL_WAITERS]);
   } else {
      char holder[320];
      snprintf (holder, sizeof holder, "%s%s", row->holder[0] ? row->holder : "-",
                row->dead ? " DEAD" : "");
      fmt_cell_ms (row->held_ms, held, sizeof held);
      fmt_cell_ms (row->left_ms > 0 ? row->left_ms : -1, left, sizeof left);
      snprintf (line, sizeof line, "%-24s %-9s %-8s %-34s %6" PRId64 " %8s %8s %5" PRId64 " %s",
                row->key, row->mode, row->state, holder, row->fence, held, left, row->holds,
                row->waiters);
   }
   size_t n = strlen (line);
   if (width > 0 && n > (size_t)width)
      n = (size_t)width;
   put_text (stdout, line, n);
   fputs (eol, stdout);
}

/* The table as text: a header, then one row a lock (at most max_rows). */
static void put_table (const top_rows_t *rows, int width, size_t max_rows, const char *eol)
{
   put_row (NULL, width, eol);
   for (size_t i = 0; i < rows->n && i < max_rows; i++)
      put_row (&rows->r[i], width, eol);
   if (rows->n > max_rows)
      printf ("... %zu more%s", rows->n - max_rows, eol);
}

/* ---- the terminal -------------------------------------------------------- */

static struct termios saved_tio;

static void term_restore (void)
{
   fputs ("\033[?25h\033[?1049l", stdout);
   fflush (stdout);
   tcsetattr (STDIN_FILENO, TCSAFLUSH, &saved_tio);
}

/* Keys one at a time, no echo (Ctrl-C still a signal), the alternate
 * screen, the cursor hidden; the signals that end top caught. */
static bool term_setup (void)
{
   if (tcgetattr (STDIN_FILENO, &saved_tio) != 0)
      return false;
   struct termios raw = saved_tio;
   raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
   raw.c_cc[VMIN] = 1;
   raw.c_cc[VTIME] = 0;
   if (tcsetattr (STDIN_FILENO, TCSAFLUSH, &raw) != 0)
      return false;
   struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: poll wakes */
   sigemptyset (&sa.sa_mask);
   int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH };
   for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
      sigaction (sigs[i], &sa, NULL);
   fputs ("\033[?1049h\033[?25l", stdout);
   return true;
}

static void term_size (int *rows, int *cols)
{
   struct winsize ws;
   *rows = 24;
   *cols = 80;
   if (ioctl (STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      *rows = ws.ws_row;
      *cols = ws.ws_col;
   }
}

/* One screen: a status line, the table, the key help. */
static void draw (const top_rows_t *rows, const top_view_t *v, const char *error)
{
   int height, width;
   term_size (&height, &width);
   size_t held = 0;
   for (size_t i = 0; i < rows->n; i++)
      held += rows->r[i].live > 0;
   fputs ("\033[H\033[2J", stdout);
   char head[1024];
   snprintf (head, sizeof head, "leaselock top: %zu locks, %zu held; sort %s%s; prefix \"%s\"%s",
             rows->n, held, col_names[v->sort], v->reverse ? " (reversed)" : "", v->prefix,
             error ? error : "");
   put_text (stdout, head, strlen (head) < (size_t)width ? strlen (head) : (size_t)width);
   fputs ("\r\n", stdout);
   int max = height - 4;
   put_table (rows, width, max > 0 ? (size_t)max : 0, "\r\n");
   fputs ("\033[", stdout);
   printf ("%d;1H", height);
   if (v->editing) {
      fputs ("prefix: ", stdout);
      put_text (stdout, v->typed, strlen (v->typed));
      fputs ("\033[?25h", stdout);
   } else {
      fputs ("\033[?25lq quit  s/S sort column  r reverse  / prefix  space refresh", stdout);
   }
   fflush (stdout);
}

/* Applies key c to the view; false when it quits. */
static bool on_key (int c, top_view_t *v)
{
   if (v->editing) {
      size_t n = strlen (v->typed);
      if (c == '\r' || c == '\n') {
         memcpy (v->prefix, v->typed, n + 1);
         v->editing = false;
      } else if (c == 27) {
         v->editing = false; /* Escape: the prefix stays as it was */
      } else if ((c == 127 || c == 8) && n > 0) {
         v->typed[n - 1] = '\0';
      } else if (c >= 0x20 && c != 127 && n + 1 < sizeof v->typed) {
         v->typed[n] = (char)c;
         v->typed[n + 1] = '\0';
      }
      return true;
   }
   if (c == 'q' || c == 'Q')
      return false;
   if (c == 's' || c == '>')
      v->sort = (v->sort + 1) % N_COLS;
   else if (c == 'S' || c == '<')
      v->sort = (v->sort + N_COLS - 1) % N_COLS;
   else if (c == 'r')
      v->reverse = !v->reverse;
   else if (c == '/' || c == 'p') {
      v->editing = true;
      memcpy (v->typed, v->prefix, sizeof v->typed);
   }
   return true;
}

/* Waits for a key or the next refresh; false when top should end. */
static bool wait_key (int64_t interval_ms, top_view_t *v, bool *redraw_only)
{
   struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
   *redraw_only = false;
   int r = poll (&p, 1, interval_ms > INT32_MAX ? INT32_MAX : (int)interval_ms);
   if (got_signal)
      return false;
   if (r < 0 && errno == EINTR) {
      *redraw_only = got_winch;
      got_winch = 0;
      return true;
   }
   if (r <= 0)
      return true;
   unsigned char c;
   ssize_t n = read (STDIN_FILENO, &c, 1);
   if (n <= 0)
      return false; /* the terminal is gone */
   if (!on_key (c, v))
      return false;
   *redraw_only = v->editing; /* a typed prefix is read once it is entered */
   return true;
}

/* The live view until q or a signal. */
static int top_live (leaselock_client_t *client, int64_t interval_ms, top_view_t *v)
{
   if (!isatty (STDIN_FILENO) || !isatty (STDOUT_FILENO))
      return usage_error ("top needs a terminal; --once or --json print without one");
   if (!term_setup ())
      return usage_error ("cannot set the terminal's mode: %s", strerror (errno));
   top_rows_t rows = { 0 };
   leaselock_error_t err;
   char msg[300] = "";
   bool redraw_only = false;
   do {
      if (!redraw_only) {
         msg[0] = '\0';
         if (!top_read (client, v->prefix, v, &rows, &err))
            snprintf (msg, sizeof msg, " (%s: %s)", leaselock_code_name (err.code), err.message);
      }
      draw (&rows, v, msg[0] ? msg : NULL);
   } while (wait_key (interval_ms, v, &redraw_only));
   term_restore ();
   free (rows.r);
   return 0;
}

/* --once or --json: a table or a JSON array, once or per interval. */
static int top_print (leaselock_client_t *client, int64_t interval_ms, bool json, bool once,
                      top_view_t *v)
{
   top_rows_t rows = { .json = json };
   leaselock_error_t err;
   for (;;) {
      if (json)
         fputc ('[', stdout);
      rows.json_count = 0;
      if (!top_read (client, v->prefix, v, &rows, &err)) {
         free (rows.r);
         if (json)
            fputs ("]\n", stdout);
         return fail ("top", &err);
      }
      if (json)
         fputs (rows.json_count ? "\n]\n" : "]\n", stdout);
      else
         put_table (&rows, 0, SIZE_MAX, "\n");
      fflush (stdout);
      if (once)
         break;
      usleep ((useconds_t)(interval_ms * 1000));
   }
   free (rows.r);
   return 0;
}

/* What top was given. */
typedef struct top_args
{
   const char *uri, *prefix;
   int64_t interval_ms;
   bool once, json;
} top_args_t;

/* One option at argv[*i]: 1 read, -1 error (message printed). */
static int top_option (int argc, char **argv, int *i, top_args_t *a)
{
   const char *v;
   int r;
   if (!strcmp (argv[*i], "--once"))
      return a->once = true, 1;
   if (!strcmp (argv[*i], "--json"))
      return a->json = true, 1;
   if ((r = opt_uri (argc, argv, i, &a->uri)) != 0)
      return r;
   if ((r = opt_value (argc, argv, i, "--prefix", &a->prefix)) != 0)
      return r;
   if ((r = opt_value (argc, argv, i, "--interval", &v)) != 0)
      return r < 0 || !parse_ms ("--interval", v, 100, 3600000, &a->interval_ms) ? -1 : 1;
   if (argv[*i][0] == '-')
      return usage_error ("unknown option %s", argv[*i]), -1;
   return usage_error ("unexpected argument \"%s\" (top takes options only: --prefix P)", argv[*i]),
          -1;
}

int cmd_top (const char *uri, int argc, char **argv)
{
   top_args_t a = { .uri = uri, .prefix = "", .interval_ms = 1000 };
   for (int i = 0; i < argc; i++) {
      if (is_help (argv[i]))
         return print_help ();
      if (top_option (argc, argv, &i, &a) < 0)
         return EXIT_USAGE;
   }
   leaselock_error_t err;
   if (a.prefix[0] && !leaselock_check_key (a.prefix, strlen (a.prefix), &err))
      return fail ("top", &err);
   top_view_t v = { .sort = COL_KEY };
   snprintf (v.prefix, sizeof v.prefix, "%s", a.prefix);
   int status = EXIT_INTERNAL;
   leaselock_client_t *client = open_client (a.uri, NULL, &status);
   if (!client)
      return status;
   if (a.once || a.json)
      status = top_print (client, a.interval_ms, a.json, a.once, &v);
   else
      status = top_live (client, a.interval_ms, &v);
   leaselock_client_destroy (client);
   return status;
}
