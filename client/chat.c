/*
 * chat.c — the `infer chat` REPL (see chat.h).
 *
 * The conversation is a JSON array of {role, content} messages (without
 * the system message, which is kept apart so /system can change it). A
 * turn appends the user's message, streams the answer and appends it as
 * the assistant's; a turn that fails is taken back out, and a turn stopped
 * with Ctrl-C keeps what was shown of the answer (nothing shown: the turn
 * is dropped), so the history always matches what the user saw.
 */
#include "chat.h"

#include "api.h"
#include "cli.h"
#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef IFD_HAVE_LIBEDIT
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <wchar.h>
#endif

enum {
    OPT_LOAD = IFD_CLI_OPT_FIRST_FREE,
};

typedef struct {
    ifd_cli_http_target_t target;
    ifd_cli_conn_t conn;
    ifd_cli_api_params_t params;
    char *system;    /* malloc'ed; NULL: none */
    json_t *history; /* user/assistant messages */
    json_t *images;  /* /image parts the next user message carries */
    bool tty;        /* stdin and stdout are terminals: prompts, banner */
    char model[256]; /* for the banner and /save */
#ifdef IFD_HAVE_LIBEDIT
    EditLine *el;
    History *hist;
#endif
} chat_t;

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: infer chat [options]\n"
            "\n"
            "Talk with the daemon's model. Every line you type is sent with the conversation\n"
            "so far and the answer streams back. End a line with \\ to continue it on the next.\n"
            "\n"
            "In the chat:\n"
            "  /reset          forget the conversation (keeps the system message)\n"
            "  /system TEXT    set the system message (/system alone removes it)\n"
            "  /image FILE     attach an image (JPEG, PNG, WebP, GIF) to your next message\n"
            "                  (the model must take images: Gemma 3 with its vision tower)\n"
            "  /save FILE      write the conversation as JSON (load it with --load)\n"
            "  /help           list these commands\n"
            "  /quit           leave (so does Ctrl-D)\n"
            "  Ctrl-C          stop the answer being generated (at the prompt: clear the line)\n"
            "\n"
            "Options:\n"
            "  -s, --system TEXT       the system message to start with\n"
            "      --load FILE         continue a conversation saved with /save\n"
            "  -h, --help              this help\n"
            "\n"
            "%s\n%s",
            ifd_cli_sampling_help, ifd_cli_conn_help);
}

static const char chat_help[] =
    "/reset  /system TEXT  /image FILE  /save FILE  /help  /quit   (Ctrl-C stops an answer, "
    "Ctrl-D quits)\n";

/* ---- line input ------------------------------------------------------------------------------ */

#ifdef IFD_HAVE_LIBEDIT
/* libedit's own reader retries a read() interrupted by a signal once, so
 * the first Ctrl-C at the prompt would be swallowed; this one gives up as
 * soon as our SIGINT flag is up. Returns 1 (a character), 0 (end of input)
 * or -1 (error; errno EINTR for Ctrl-C). Bytes are decoded per the locale. */
static int el_getc_fn(EditLine *el, wchar_t *wc)
{
    (void)el;
    mbstate_t st;
    memset(&st, 0, sizeof(st));
    for (;;) {
        char c;
        ssize_t n = read(STDIN_FILENO, &c, 1);
        if (n < 0 && errno == EINTR && !ifd_cli_interrupted)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        size_t k = mbrtowc(wc, &c, 1, &st);
        if (k == (size_t)-2)
            continue; /* more bytes of this character to come */
        if (k == (size_t)-1) {
            *wc = (wchar_t)(unsigned char)c; /* not valid here: pass the byte on */
            memset(&st, 0, sizeof(st));
        }
        return 1;
    }
}

static char *el_prompt(EditLine *el)
{
    (void)el;
    return ">>> ";
}

static char *el_prompt_more(EditLine *el)
{
    (void)el;
    return "... ";
}
#endif

static void input_close(chat_t *ch)
{
#ifdef IFD_HAVE_LIBEDIT
    if (ch->el)
        el_end(ch->el);
    if (ch->hist)
        history_end(ch->hist);
    ch->el = NULL;
    ch->hist = NULL;
#else
    (void)ch;
#endif
}

static void input_open(chat_t *ch, const char *argv0)
{
#ifdef IFD_HAVE_LIBEDIT
    if (!ch->tty)
        return;
    /* libedit edits characters in the locale's encoding; the API speaks
     * UTF-8, so without a UTF-8 locale take C.UTF-8 where it exists. */
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc || strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
        setlocale(LC_CTYPE, "C.UTF-8");
    ch->el = el_init(argv0, stdin, stdout, stderr);
    ch->hist = history_init();
    if (!ch->el || !ch->hist) {
        input_close(ch);
        return;
    }
    HistEvent ev;
    history(ch->hist, &ev, H_SETSIZE, 1000);
    history(ch->hist, &ev, H_SETUNIQUE, 1);
    el_set(ch->el, EL_EDITOR, "emacs");
    el_set(ch->el, EL_SIGNAL, 0); /* our SIGINT handler decides */
    el_set(ch->el, EL_GETCFN, el_getc_fn);
    el_set(ch->el, EL_HIST, history, ch->hist);
    el_set(ch->el, EL_PROMPT, el_prompt);
    el_source(ch->el, NULL); /* ~/.editrc */
#else
    (void)ch;
    (void)argv0;
#endif
}

/* One physical line into *line (without its newline). 1 a line, 0 end of
 * input, 2 interrupted (Ctrl-C), -1 out of memory. */
static int read_physical(chat_t *ch, bool more, ifd_buf_t *line)
{
    ifd_buf_clear(line);
    ifd_cli_interrupted = 0;
#ifdef IFD_HAVE_LIBEDIT
    if (ch->el) {
        int count = 0;
        el_set(ch->el, EL_PROMPT, more ? el_prompt_more : el_prompt);
        errno = 0;
        const char *s = el_gets(ch->el, &count);
        if (!s || count <= 0) {
            if (ifd_cli_interrupted || (count < 0 && errno == EINTR)) {
                el_reset(ch->el);
                return 2;
            }
            return 0;
        }
        size_t n = strlen(s);
        while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
            n--;
        return ifd_buf_append(line, s, n) < 0 ? -1 : 1;
    }
#endif
    if (ch->tty) {
        fputs(more ? "... " : ">>> ", stdout);
        fflush(stdout);
    }
    char *s = NULL;
    size_t cap = 0;
    ssize_t n = getline(&s, &cap, stdin);
    if (n < 0) {
        free(s);
        if (ifd_cli_interrupted) {
            clearerr(stdin);
            return 2;
        }
        return 0;
    }
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    int rc = ifd_buf_append(line, s, (size_t)n) < 0 ? -1 : 1;
    free(s);
    return rc;
}

/* A logical line: physical lines joined while they end with a backslash. */
static int read_input(chat_t *ch, ifd_buf_t *out)
{
    ifd_buf_t line = IFD_BUF_INIT;
    ifd_buf_clear(out);
    int rc;
    bool more = false;
    for (;;) {
        rc = read_physical(ch, more, &line);
        if (rc != 1)
            break;
        bool cont = line.len && line.data[line.len - 1] == '\\';
        if (cont)
            line.len--;
        if ((more && ifd_buf_append(out, "\n", 1) < 0) ||
            ifd_buf_append(out, line.data ? line.data : "", line.len) < 0) {
            rc = -1;
            break;
        }
        if (!cont)
            break;
        more = true;
    }
    if (rc == 0 && more)
        rc = 1; /* EOF after a continued line: send what there is */
#ifdef IFD_HAVE_LIBEDIT
    if (rc == 1 && ch->hist && out->len) {
        HistEvent ev;
        history(ch->hist, &ev, H_ENTER, out->data);
    }
#endif
    ifd_buf_free(&line);
    return rc;
}

/* ---- commands -------------------------------------------------------------------------------- */

static json_t *conversation(const chat_t *ch)
{
    json_t *msgs = json_array();
    if (ch->system)
        json_array_append_new(msgs,
                              json_pack("{s:s,s:s}", "role", "system", "content", ch->system));
    json_array_extend(msgs, ch->history);
    return msgs;
}

static void cmd_save(chat_t *ch, const char *file)
{
    if (!*file) {
        fprintf(stderr, "usage: /save FILE\n");
        return;
    }
    json_t *o = json_pack("{s:s,s:o}", "model", ch->model, "messages", conversation(ch));
    if (!o || json_dump_file(o, file, JSON_INDENT(2)) < 0)
        fprintf(stderr, "infer: cannot write %s: %s\n", file, strerror(errno));
    else
        fprintf(stderr, "saved %zu messages to %s\n", json_array_size(ch->history), file);
    json_decref(o);
}

static int load(chat_t *ch, const char *file)
{
    json_error_t je;
    json_t *o = json_load_file(file, 0, &je);
    json_t *msgs = json_is_object(o) ? json_object_get(o, "messages") : o;
    if (!json_is_array(msgs)) {
        fprintf(stderr, "infer: %s: not a saved conversation (%s)\n", file,
                o ? "no messages array" : je.text);
        json_decref(o);
        return -1;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *cj = json_object_get(m, "content");
        const char *content = json_string_value(cj);
        if (role && json_is_array(cj) && strcmp(role, "system") != 0) { /* parts: images */
            json_array_append_new(ch->history, json_pack("{s:s,s:O}", "role", role, "content", cj));
            continue;
        }
        if (!role || !content) {
            fprintf(stderr, "infer: %s: message %zu lacks role or content\n", file, i);
            json_decref(o);
            return -1;
        }
        if (strcmp(role, "system") == 0) {
            free(ch->system);
            ch->system = strdup(content);
        } else {
            json_array_append_new(ch->history,
                                  json_pack("{s:s,s:s}", "role", role, "content", content));
        }
    }
    json_decref(o);
    return 0;
}

/* 1: quit. */
static int command(chat_t *ch, const char *line)
{
    const char *arg = line + strcspn(line, " \t");
    size_t n = (size_t)(arg - line);
    arg += strspn(arg, " \t");
#define IS(s) (n == strlen(s) && strncmp(line, s, n) == 0)
    if (IS("/quit") || IS("/exit") || IS("/bye"))
        return 1;
    if (IS("/help") || IS("/?")) {
        fputs(chat_help, stderr);
    } else if (IS("/reset") || IS("/clear")) {
        json_array_clear(ch->history);
        json_array_clear(ch->images);
        fprintf(stderr, "conversation cleared%s\n", ch->system ? " (system message kept)" : "");
    } else if (IS("/system")) {
        free(ch->system);
        ch->system = *arg ? strdup(arg) : NULL;
        fprintf(stderr, ch->system ? "system message set\n" : "system message removed\n");
    } else if (IS("/save")) {
        cmd_save(ch, arg);
    } else if (IS("/image")) {
        char err[512];
        json_t *part = *arg ? ifd_cli_api_image_part(arg, err, sizeof err) : NULL;
        if (!*arg)
            fprintf(stderr, "usage: /image FILE\n");
        else if (!part)
            fprintf(stderr, "infer: %s\n", err);
        else if (json_array_append_new(ch->images, part) == 0)
            fprintf(stderr, "image %s attached to your next message (%zu in all)\n", arg,
                    json_array_size(ch->images));
    } else {
        fprintf(stderr, "unknown command %.*s — %s", (int)n, line, chat_help);
    }
#undef IS
    return 0;
}

/* One turn. Returns its exit code (cli.h); the reason has been printed. */
static int turn(chat_t *ch, const char *text)
{
    /* the images attached with /image go with this message (and stay in the history) */
    json_array_append_new(ch->history, ifd_cli_api_user_message(text, ch->images));
    json_array_clear(ch->images);
    json_t *msgs = conversation(ch);
    char *body = ifd_cli_api_chat_body(&ch->params, msgs);
    json_decref(msgs);
    if (!body) {
        fprintf(stderr, "infer: out of memory (or the text is not valid UTF-8)\n");
        json_array_remove(ch->history, json_array_size(ch->history) - 1);
        return 0;
    }
    ifd_cli_api_reader_t r;
    ifd_cli_api_reader_init(&r, NULL, NULL, NULL);
    ifd_buf_t answer = IFD_BUF_INIT;
    ifd_cli_interrupted = 0;
    int code =
        ifd_cli_complete(&ch->target, &ch->conn, "/v1/chat/completions", body, stdout, &answer, &r);
    free(body);
    if (answer.len && answer.data[answer.len - 1] != '\n')
        fputc('\n', stdout);
    fflush(stdout);
    if (code == IFD_CLI_EXIT_INTERRUPTED)
        fprintf(stderr, "[stopped]\n");
    else if (code == IFD_CLI_EXIT_OK && strcmp(r.finish_reason, "length") == 0)
        fprintf(stderr, "[the answer reached the token limit]\n");
    bool keep = code == IFD_CLI_EXIT_OK || (code == IFD_CLI_EXIT_INTERRUPTED && answer.len > 0);
    if (keep) {
        json_array_append_new(ch->history, json_pack("{s:s,s:s%}", "role", "assistant", "content",
                                                     answer.data ? answer.data : "", answer.len));
    } else {
        json_array_remove(ch->history, json_array_size(ch->history) - 1);
    }
    ifd_buf_free(&answer);
    ifd_cli_api_reader_close(&r);
    return code;
}

int ifd_cli_chat_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"system", required_argument, NULL, 's'},
        {"load", required_argument, NULL, OPT_LOAD},
        {"help", no_argument, NULL, 'h'},
        IFD_CLI_SAMPLING_LONGOPTS,
        IFD_CLI_CONN_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    chat_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.params = ifd_cli_api_default_params();
    ch.history = json_array();
    ch.images = json_array();
    ifd_cli_conn_defaults(&ch.conn);
    const char *load_file = NULL;
    int c, rc, code = IFD_CLI_EXIT_USAGE;
    while ((c = ifd_cli_getopt(argc, argv, "s:h" IFD_CLI_SAMPLING_SHORTOPTS, opts, &ch.conn,
                               &ch.params)) >= 0) {
        switch (c) {
        case 's':
            free(ch.system);
            ch.system = strdup(optarg);
            break;
        case OPT_LOAD:
            load_file = optarg;
            break;
        case 'h':
            usage(stdout);
            code = IFD_CLI_EXIT_OK;
            goto out;
        default:
            ifd_cli_usage_hint("chat");
            goto out;
        }
    }
    if (c == IFD_CLI_OPT_BAD)
        goto out;
    if (optind != argc) {
        fprintf(stderr, "infer chat: unexpected argument '%s' (try 'infer chat --help')\n",
                argv[optind]);
        goto out;
    }
    if (load_file && load(&ch, load_file) < 0) {
        code = IFD_CLI_EXIT_FAIL;
        goto out;
    }
    if ((code = ifd_cli_target(&ch.conn, &ch.target)) != 0)
        goto out;

    /* Fail fast, before the user types anything, when there is no daemon. */
    json_t *models = NULL;
    if ((code = ifd_cli_get_json(&ch.target, &ch.conn, "GET", "/v1/models", NULL, &models)) != 0)
        goto out;
    const char *id = json_string_value(
        json_object_get(json_array_get(json_object_get(models, "data"), 0), "id"));
    snprintf(ch.model, sizeof(ch.model), "%s", ch.params.model ? ch.params.model : id ? id : "?");
    json_decref(models);

    ch.tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (ch.tty)
        fprintf(stderr, "infer chat — %s at %s. /help for commands, Ctrl-D to quit.\n", ch.model,
                ch.target.where);
    input_open(&ch, argv[0]);
    ifd_cli_catch_sigint(true);
    ifd_buf_t line = IFD_BUF_INIT;
    code = IFD_CLI_EXIT_OK;
    for (;;) {
        rc = read_input(&ch, &line);
        if (rc == 0) {
            if (ch.tty)
                fputc('\n', stderr);
            break;
        }
        if (rc < 0) {
            code = IFD_CLI_EXIT_FAIL;
            break;
        }
        if (rc == 2) {
            fputs("^C\n", stderr);
            continue;
        }
        const char *s = line.data + strspn(line.data, " \t");
        if (!*s)
            continue;
        if (s[0] == '/' && s[1] != '/') {
            if (command(&ch, s))
                break;
            continue;
        }
        if (s[0] == '/')
            s++; /* "//text" sends "/text" */
        /* A failed turn is reported and the chat goes on; read from a pipe,
         * the worst failure becomes the exit status, and an unreachable
         * daemon ends it. */
        int tc = turn(&ch, s);
        if (tc != IFD_CLI_EXIT_OK && tc != IFD_CLI_EXIT_INTERRUPTED && !ch.tty) {
            code = tc;
            if (tc == IFD_CLI_EXIT_UNREACHABLE)
                break;
        }
    }
    ifd_buf_free(&line);
    ifd_cli_catch_sigint(false);
    input_close(&ch);
out:
    free(ch.system);
    json_decref(ch.history);
    json_decref(ch.images);
    return code;
}
