/*
 * cli.h — what every `infer` command that talks to the daemon shares: the
 * exit codes, the connection options (--socket, --url, --api-key,
 * --timeout) and how they resolve, errors explained in words a person can
 * act on, the SIGINT flag, and one blocking completion request that
 * streams its text to a FILE.
 *
 * Exit codes (docs/cli.md lists them):
 *   0   success
 *   1   a local failure (a file could not be read or written, out of memory)
 *   2   usage: bad command, option or argument
 *   3   the daemon could not be reached (no socket, nothing listening,
 *       permission denied, host not found, timed out)
 *   4   the daemon rejected the request (HTTP 4xx: bad parameter, unknown
 *       model, bad API key, prompt too long)
 *   5   the daemon failed (HTTP 5xx, an error inside the stream, the
 *       connection dropped mid-answer, a malformed response)
 *   130 interrupted (Ctrl-C)
 *
 * Messages go to stderr, prefixed "infer: ". Threading: the main thread
 * only (getopt and the signal flag are process-wide).
 */
#ifndef IFD_CLIENT_CLI_H
#define IFD_CLIENT_CLI_H

#include "api.h"
#include "http.h"

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>

enum {
    IFD_CLI_EXIT_OK = 0,
    IFD_CLI_EXIT_FAIL = 1,
    IFD_CLI_EXIT_USAGE = 2,
    IFD_CLI_EXIT_UNREACHABLE = 3,
    IFD_CLI_EXIT_REJECTED = 4,
    IFD_CLI_EXIT_SERVER = 5,
    IFD_CLI_EXIT_INTERRUPTED = 130,
};

/* The one piece of global state: raised by the SIGINT handler. */
extern volatile sig_atomic_t ifd_cli_interrupted;

/* on: SIGINT sets ifd_cli_interrupted and interrupts blocking calls (no
 * SA_RESTART), and the flag is cleared; off: SIGINT's default action. */
void ifd_cli_catch_sigint(bool on);

/* Connection options as given on the command line (borrowed strings). */
typedef struct {
    const char *socket;
    const char *url;
    const char *api_key;
    int timeout_s; /* no progress for this long is an error; default 600 */
} ifd_cli_conn_t;

/* getopt_long codes of the connection options (outside the char range). */
enum {
    IFD_CLI_OPT_SOCKET = 0x1000,
    IFD_CLI_OPT_URL,
    IFD_CLI_OPT_API_KEY,
    IFD_CLI_OPT_TIMEOUT,
    IFD_CLI_OPT_TOP_P,
    IFD_CLI_OPT_SEED,
    IFD_CLI_OPT_NO_CACHE,
    IFD_CLI_OPT_IGNORE_EOS,
    IFD_CLI_OPT_FIRST_FREE, /* commands number their own long-only options from here */
};

#define IFD_CLI_CONN_LONGOPTS                                                                      \
    {"socket", required_argument, NULL, IFD_CLI_OPT_SOCKET},                                       \
        {"url", required_argument, NULL, IFD_CLI_OPT_URL},                                         \
        {"api-key", required_argument, NULL, IFD_CLI_OPT_API_KEY},                                 \
    {                                                                                              \
        "timeout", required_argument, NULL, IFD_CLI_OPT_TIMEOUT                                    \
    }

/* The --help paragraph describing them. */
extern const char ifd_cli_conn_help[];

/* Sampling options shared by the prompt and chat commands: -m/--model,
 * -n/--max-tokens, -t/--temperature, --top-p, --seed, --no-cache, --ignore-eos. */
#define IFD_CLI_SAMPLING_LONGOPTS                                                                  \
    {"model", required_argument, NULL, 'm'}, {"max-tokens", required_argument, NULL, 'n'},         \
        {"temperature", required_argument, NULL, 't'},                                             \
        {"top-p", required_argument, NULL, IFD_CLI_OPT_TOP_P},                                     \
        {"seed", required_argument, NULL, IFD_CLI_OPT_SEED},                                       \
        {"no-cache", no_argument, NULL, IFD_CLI_OPT_NO_CACHE},                                     \
    {                                                                                              \
        "ignore-eos", no_argument, NULL, IFD_CLI_OPT_IGNORE_EOS                                    \
    }
#define IFD_CLI_SAMPLING_SHORTOPTS "m:n:t:"
extern const char ifd_cli_sampling_help[];

void ifd_cli_conn_defaults(ifd_cli_conn_t *o);

/* What ifd_cli_getopt returns when a shared option has a bad value. */
#define IFD_CLI_OPT_BAD (-2)

/*
 * getopt_long(argc, argv, shortopts, opts) for a command that talks to the
 * daemon, handling the shared options itself: the connection options into
 * co and, when p is not NULL, the sampling options into p. Returns the next
 * code that is none of them (the command's own, or '?'), -1 after the last
 * option, or IFD_CLI_OPT_BAD when a shared option's value is bad (message
 * printed).
 */
int ifd_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *opts,
                   ifd_cli_conn_t *co, ifd_cli_api_params_t *p);

/* Prints "Try 'infer <cmd> --help'." (after an unknown option); returns
 * IFD_CLI_EXIT_USAGE. */
int ifd_cli_usage_hint(const char *cmd);

/* After the options of a command that takes no operands: 0 when none is
 * left, else IFD_CLI_EXIT_USAGE with "infer <cmd>: unexpected argument"
 * printed. */
int ifd_cli_no_operands(const char *cmd, int argc, char **argv);

/*
 * Resolves the options into a target: --url (TCP, key from --api-key or
 * $INFERD_API_KEY), else --socket, else $INFERD_SOCKET, else the daemon's
 * default socket. 0, or an exit code with the reason printed.
 */
int ifd_cli_target(const ifd_cli_conn_t *o, ifd_cli_http_target_t *t);

/* Prints what a transport error means for target t and what to do about
 * it; returns the exit code (3 or 5). */
int ifd_cli_report(const ifd_cli_http_target_t *t, int err);

/* Prints an HTTP error response (status, the server's message, hints);
 * returns 4 (4xx) or 5. */
int ifd_cli_report_http_error(const ifd_cli_http_target_t *t, int status, const char *body,
                              size_t len, const char *retry_after);

/*
 * One completion request (chat or plain, per `path`) with a JSON body,
 * blocking, its text written to `out` (flushed per chunk; may be NULL) and
 * appended to `answer` (may be NULL). `r` is an initialised reader without
 * callbacks; it holds the finish reason and usage afterwards. Ctrl-C
 * (with ifd_cli_catch_sigint(true)) closes the connection at once, which
 * cancels the request in the daemon. Returns an exit code; on failure the
 * reason has been printed, except for 130.
 */
int ifd_cli_complete(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *o, const char *path,
                     const char *body, FILE *out, ifd_buf_t *answer, ifd_cli_api_reader_t *r);

/*
 * A blocking GET (or POST with body) whose 200 body is JSON: *out gets the
 * parsed object (json_decref it). Returns an exit code, the reason printed.
 */
int ifd_cli_get_json(const ifd_cli_http_target_t *t, const ifd_cli_conn_t *o, const char *method,
                     const char *path, const char *body, json_t **out);

/* Parses a positive number (strtod with checks). 0 or -1. */
int ifd_cli_parse_double(const char *s, double lo, double hi, double *out);
int ifd_cli_parse_int(const char *s, long long lo, long long hi, long long *out);

#endif
