/*
 * config.c — see config.h. Everything is driven by IFD_CONFIG_KEYS: the
 * key table below is generated from it, and the parsers, --help, the JSON
 * printer and the reload diff walk that table. Values are always parsed
 * from text (defaults too), so a default can never be of the wrong type.
 */
#include "config.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* One row of the table (help, the JSON printout, the reload diff). */
typedef struct {
    const char *name;
    ifd_cfg_type_t type;
    const char *def;
    bool reloadable;
    const char *arg; /* metavariable in --help; NULL for bools */
    double lo, hi;   /* range for INT/BYTES/SECS; lo == hi == 0: none */
    const char *help;
    size_t offset; /* of the field in ifd_config_t */
} ifd_cfg_key_t;

static const ifd_cfg_key_t ifd__keys[] = {
#define IFD__CFG_ROW(name, type, def, reload, arg, lo, hi, help)                                   \
    {#name, IFD_CFG_##type, def, reload, arg, lo, hi, help, offsetof(ifd_config_t, name)},
    IFD_CONFIG_KEYS(IFD__CFG_ROW)
#undef IFD__CFG_ROW
};
#define IFD__N_KEYS (sizeof ifd__keys / sizeof ifd__keys[0])

static const ifd_cfg_key_t *ifd__find(const char *name, size_t len)
{
    for (size_t i = 0; i < IFD__N_KEYS; i++)
        if (strlen(ifd__keys[i].name) == len && memcmp(ifd__keys[i].name, name, len) == 0)
            return &ifd__keys[i];
    return NULL;
}

static void *ifd__field(const ifd_config_t *c, const ifd_cfg_key_t *k)
{
    return (char *)c + k->offset;
}

/* ---- value parsing ------------------------------------------------------------ */

static int ifd__parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return IFD_EINVAL;
    *out = v;
    return 0;
}

static int ifd__parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0 || !isfinite(v))
        return IFD_EINVAL;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'b' || *end == 'B')
        end++;
    if (*end || v * mul > 1.8e19)
        return IFD_EINVAL;
    *out = (uint64_t)(v * mul);
    return 0;
}

static int ifd__parse_bool(const char *s, bool *out)
{
    if (!strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "yes") ||
        !strcasecmp(s, "on")) {
        *out = true;
        return 0;
    }
    if (!strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "no") ||
        !strcasecmp(s, "off")) {
        *out = false;
        return 0;
    }
    return IFD_EINVAL;
}

static int ifd__parse_secs(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v))
        return IFD_EINVAL;
    if (!strcmp(end, "ms"))
        v /= 1000.0;
    else if (!strcmp(end, "m") || !strcmp(end, "min"))
        v *= 60.0;
    else if (!strcmp(end, "h"))
        v *= 3600.0;
    else if (*end && strcmp(end, "s") != 0)
        return IFD_EINVAL;
    *out = v;
    return 0;
}

static int ifd__parse_num(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return IFD_EINVAL;
    *out = v;
    return 0;
}

static const char *ifd__type_name(ifd_cfg_type_t t)
{
    switch (t) {
    case IFD_CFG_STR:
        return "string";
    case IFD_CFG_INT:
        return "integer";
    case IFD_CFG_BYTES:
        return "bytes";
    case IFD_CFG_BOOL:
        return "bool";
    case IFD_CFG_SECS:
        return "seconds";
    case IFD_CFG_NUM:
        return "number";
    }
    return "?";
}

static int ifd__range(const ifd_cfg_key_t *k, double v, char *err, size_t errlen)
{
    if (k->lo == 0 && k->hi == 0)
        return 0;
    if (v < k->lo || (k->hi != 0 && v > k->hi)) {
        if (k->hi != 0)
            ifd_errbuf(err, errlen, "%s: %g is out of range [%g, %g]", k->name, v, k->lo, k->hi);
        else
            ifd_errbuf(err, errlen, "%s: %g is below the minimum %g", k->name, v, k->lo);
        return IFD_EINVAL;
    }
    return 0;
}

static int ifd__set_key(ifd_config_t *c, const ifd_cfg_key_t *k, const char *v, char *err,
                        size_t errlen)
{
    void *f = ifd__field(c, k);
    int64_t i64;
    uint64_t u64;
    double d;
    bool b;
    switch (k->type) {
    case IFD_CFG_STR: {
        char *s = strdup(v);
        if (!s)
            return IFD_ENOMEM;
        free(*(char **)f);
        *(char **)f = s;
        return 0;
    }
    case IFD_CFG_INT:
        if (ifd__parse_int(v, &i64))
            break;
        if (ifd__range(k, (double)i64, err, errlen))
            return IFD_EINVAL;
        *(int64_t *)f = i64;
        return 0;
    case IFD_CFG_BYTES:
        if (ifd__parse_bytes(v, &u64))
            break;
        if (ifd__range(k, (double)u64, err, errlen))
            return IFD_EINVAL;
        *(uint64_t *)f = u64;
        return 0;
    case IFD_CFG_BOOL:
        if (ifd__parse_bool(v, &b))
            break;
        *(bool *)f = b;
        return 0;
    case IFD_CFG_SECS:
    case IFD_CFG_NUM:
        if (k->type == IFD_CFG_SECS ? ifd__parse_secs(v, &d) : ifd__parse_num(v, &d))
            break;
        if (ifd__range(k, d, err, errlen))
            return IFD_EINVAL;
        *(double *)f = d;
        return 0;
    }
    ifd_errbuf(err, errlen, "%s: '%s' is not a valid %s", k->name, v, ifd__type_name(k->type));
    return IFD_EINVAL;
}

/* ---- lifecycle ------------------------------------------------------------------ */

/* Fills every key with its default. 0 or IFD_ENOMEM. */
static int ifd__init(ifd_config_t *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < IFD__N_KEYS; i++) {
        char err[256] = "";
        int rc = ifd__set_key(c, &ifd__keys[i], ifd__keys[i].def, err, sizeof err);
        if (rc == IFD_ENOMEM) {
            ifd_config_free(c);
            return rc;
        }
        IFD_ASSERT(rc == 0); /* a broken default is a bug in the table */
    }
    return 0;
}

void ifd_config_free(ifd_config_t *c)
{
    for (size_t i = 0; i < IFD__N_KEYS; i++) {
        if (ifd__keys[i].type == IFD_CFG_STR) {
            char **s = ifd__field(c, &ifd__keys[i]);
            free(*s);
            *s = NULL;
        }
    }
}

void ifd_config_cli_free(ifd_config_cli_t *cli)
{
    free(cli->config_file);
    free(cli->inspect);
    for (int i = 0; i < cli->argc; i++)
        free(cli->argv[i]);
    free(cli->argv);
    memset(cli, 0, sizeof *cli);
}

/* ---- JSON file -------------------------------------------------------------------- */

static int ifd__load_file(ifd_config_t *c, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        ifd_errbuf(err, errlen, "config file %s: line %d: %s", path, je.line, je.text);
        return IFD_EINVAL;
    }
    int rc = 0;
    if (!json_is_object(root)) {
        ifd_errbuf(err, errlen, "config file %s: expected one JSON object", path);
        rc = IFD_EINVAL;
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        const ifd_cfg_key_t *k = ifd__find(key, strlen(key));
        char text[4096];
        if (!k) {
            ifd_errbuf(err, errlen, "config file %s: unknown key '%s' (see inferd --help)", path,
                     key);
            rc = IFD_EINVAL;
            goto out;
        }
        bool ok = true;
        switch (k->type) {
        case IFD_CFG_STR:
            if (json_is_string(v)) {
                snprintf(text, sizeof text, "%s", json_string_value(v));
            } else if (json_is_array(v) && !strcmp(k->name, "gpus")) {
                /* gpus may also be a list of ids */
                size_t i, off = 0;
                json_t *e;
                text[0] = '\0';
                json_array_foreach(v, i, e)
                {
                    if (!json_is_integer(e)) {
                        ok = false;
                        break;
                    }
                    off += (size_t)snprintf(text + off, sizeof text - off, "%s%lld", i ? "," : "",
                                            (long long)json_integer_value(e));
                    if (off >= sizeof text)
                        ok = false;
                }
            } else {
                ok = false;
            }
            break;
        case IFD_CFG_INT:
            ok = json_is_integer(v);
            if (ok)
                snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            break;
        case IFD_CFG_BYTES:
            if (json_is_integer(v))
                snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
            else if (json_is_string(v))
                snprintf(text, sizeof text, "%s", json_string_value(v));
            else
                ok = false;
            break;
        case IFD_CFG_BOOL:
            ok = json_is_boolean(v);
            if (ok)
                snprintf(text, sizeof text, "%s", json_is_true(v) ? "true" : "false");
            break;
        case IFD_CFG_NUM:
            ok = json_is_number(v);
            if (ok)
                snprintf(text, sizeof text, "%.17g", json_number_value(v));
            break;
        case IFD_CFG_SECS:
            if (json_is_number(v))
                snprintf(text, sizeof text, "%.17g", json_number_value(v));
            else if (json_is_string(v))
                snprintf(text, sizeof text, "%s", json_string_value(v));
            else
                ok = false;
            break;
        }
        if (!ok) {
            ifd_errbuf(err, errlen, "config file %s: '%s' must be a %s", path, key,
                     ifd__type_name(k->type));
            rc = IFD_EINVAL;
            goto out;
        }
        char kerr[512] = "";
        if ((rc = ifd__set_key(c, k, text, kerr, sizeof kerr))) {
            ifd_errbuf(err, errlen, "config file %s: %s", path, kerr);
            goto out;
        }
    }
out:
    json_decref(root);
    return rc;
}

/* ---- command line ------------------------------------------------------------------ */

/* Matches "--flag-name" (without value) against a key; the flag spells '_' as '-'. */
static const ifd_cfg_key_t *ifd__find_flag(const char *flag, size_t len, bool *negated)
{
    char name[96];
    *negated = false;
    if (len >= sizeof name)
        return NULL;
    for (size_t i = 0; i < len; i++)
        name[i] = flag[i] == '-' ? '_' : flag[i];
    name[len] = '\0';
    const ifd_cfg_key_t *k = ifd__find(name, len);
    if (!k && len > 3 && !strncmp(name, "no_", 3)) {
        k = ifd__find(name + 3, len - 3);
        if (k && k->type == IFD_CFG_BOOL)
            *negated = true;
        else
            k = NULL;
    }
    return k;
}

/* Applies the settings flags of argv (as kept in cli) to c. */
static int ifd__apply_flags(ifd_config_t *c, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        bool neg;
        const ifd_cfg_key_t *k = ifd__find_flag(name, nlen, &neg);
        if (!k) {
            ifd_errbuf(err, errlen, "unknown option '%s' (see inferd --help)", a);
            return IFD_EINVAL;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else if (k->type == IFD_CFG_BOOL) {
            val = neg ? "false" : "true";
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            ifd_errbuf(err, errlen, "option '%s' needs a value", a);
            return IFD_EINVAL;
        }
        if (neg && eq) {
            ifd_errbuf(err, errlen, "option '%s' takes no value", a);
            return IFD_EINVAL;
        }
        char kerr[512] = "";
        int rc = ifd__set_key(c, k, val, kerr, sizeof kerr);
        if (rc) {
            ifd_errbuf(err, errlen, "option --%.*s: %s", (int)nlen, name, kerr);
            return rc;
        }
    }
    return 0;
}

static int ifd__build(ifd_config_t *c, const ifd_config_cli_t *cli, char *err, size_t errlen)
{
    int rc = ifd__init(c);
    if (rc)
        return rc;
    if (cli->config_file && (rc = ifd__load_file(c, cli->config_file, err, errlen)))
        goto fail;
    if ((rc = ifd__apply_flags(c, cli->argc, cli->argv, err, errlen)))
        goto fail;
    return 0;
fail:
    ifd_config_free(c);
    return rc;
}

static int ifd__keep_arg(ifd_config_cli_t *cli, const char *a)
{
    char **v = realloc(cli->argv, (size_t)(cli->argc + 1) * sizeof *v);
    if (!v)
        return IFD_ENOMEM;
    cli->argv = v;
    if (!(v[cli->argc] = strdup(a)))
        return IFD_ENOMEM;
    cli->argc++;
    return 0;
}

int ifd_config_from_args(ifd_config_t *c, ifd_config_cli_t *cli, int argc, char **argv, char *err,
                         size_t errlen)
{
    memset(cli, 0, sizeof *cli);
    memset(c, 0, sizeof *c);
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli->help = true;
        } else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            cli->version = true;
        } else if (!strcmp(a, "--print-config")) {
            cli->print_config = true;
        } else if (!strcmp(a, "--json")) {
            cli->json = true;
        } else if (!strcmp(a, "--config") || !strncmp(a, "--config=", 9) ||
                   !strcmp(a, "--inspect") || !strncmp(a, "--inspect=", 10)) {
            /* the two options with a value that are not settings */
            const bool cfg = !strncmp(a, "--config", 8);
            const size_t n = cfg ? 8 : 9;
            const char *v = a[n] == '=' ? a + n + 1 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !*v) {
                ifd_errbuf(err, errlen, "option '%.*s' needs a value", (int)n, a);
                rc = IFD_EINVAL;
                goto fail;
            }
            char **dst = cfg ? &cli->config_file : &cli->inspect;
            free(*dst);
            if (!(*dst = strdup(v))) {
                rc = IFD_ENOMEM;
                goto fail;
            }
        } else if (!strncmp(a, "--", 2) && a[2]) {
            /* a setting: keep it (and its value) for ifd__apply_flags and reloads */
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
            bool neg;
            const ifd_cfg_key_t *k = ifd__find_flag(name, nlen, &neg);
            if (!k) {
                ifd_errbuf(err, errlen, "unknown option '%s' (see inferd --help)", a);
                rc = IFD_EINVAL;
                goto fail;
            }
            if ((rc = ifd__keep_arg(cli, a)))
                goto fail;
            if (!eq && k->type != IFD_CFG_BOOL && i + 1 < argc)
                if ((rc = ifd__keep_arg(cli, argv[++i])))
                    goto fail;
        } else {
            ifd_errbuf(err, errlen, "unexpected argument '%s' (see inferd --help)", a);
            rc = IFD_EINVAL;
            goto fail;
        }
    }
    if (cli->json && !cli->inspect && !cli->help && !cli->version) {
        ifd_errbuf(err, errlen, "option '--json' needs '--inspect PATH'");
        rc = IFD_EINVAL;
        goto fail;
    }
    /* these need no settings (and no --model) */
    if (cli->help || cli->version || cli->inspect)
        return ifd__init(c);
    if ((rc = ifd__build(c, cli, err, errlen)))
        goto fail;
    return 0;
fail:
    ifd_config_cli_free(cli);
    return rc;
}

int ifd_config_reload(ifd_config_t *out, const ifd_config_cli_t *cli, char *err, size_t errlen)
{
    return ifd__build(out, cli, err, errlen);
}

static bool ifd__equal(const ifd_config_t *a, const ifd_config_t *b, const ifd_cfg_key_t *k)
{
    const void *fa = ifd__field(a, k), *fb = ifd__field(b, k);
    switch (k->type) {
    case IFD_CFG_STR: {
        const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;
        return strcmp(sa ? sa : "", sb ? sb : "") == 0;
    }
    case IFD_CFG_INT:
        return *(const int64_t *)fa == *(const int64_t *)fb;
    case IFD_CFG_BYTES:
        return *(const uint64_t *)fa == *(const uint64_t *)fb;
    case IFD_CFG_BOOL:
        return *(const bool *)fa == *(const bool *)fb;
    case IFD_CFG_SECS:
    case IFD_CFG_NUM:
        return *(const double *)fa == *(const double *)fb;
    }
    return true;
}

int ifd_config_apply_reloadable(ifd_config_t *cur, const ifd_config_t *next)
{
    int changed = 0;
    for (size_t i = 0; i < IFD__N_KEYS; i++) {
        const ifd_cfg_key_t *k = &ifd__keys[i];
        if (ifd__equal(cur, next, k))
            continue;
        if (!k->reloadable) {
            IFD_WARN("reload: '%s' changed but needs a restart to take effect", k->name);
            continue;
        }
        void *fc = ifd__field(cur, k);
        const void *fn = ifd__field(next, k);
        if (k->type == IFD_CFG_STR) {
            const char *s = *(char *const *)fn;
            char *d = strdup(s ? s : "");
            if (!d)
                return IFD_ENOMEM;
            free(*(char **)fc);
            *(char **)fc = d;
        } else {
            size_t sz = k->type == IFD_CFG_BOOL ? sizeof(bool) : sizeof(int64_t);
            memcpy(fc, fn, sz);
        }
        IFD_INFO("reload: '%s' changed", k->name);
        changed++;
    }
    return changed;
}

/* ---- output -------------------------------------------------------------------------- */

void ifd_config_usage(FILE *f)
{
    fprintf(f, "Usage: inferd --model PATH [options]\n"
               "\n"
               "The inferd router daemon: serves a model over an OpenAI-compatible HTTP API on\n"
               "a Unix socket (and optionally TCP), with worker processes doing the compute.\n"
               "\n"
               "  --config FILE          JSON file with any of the settings below (flags win)\n"
               "  --print-config         print the effective settings as JSON and exit\n"
               "  --inspect PATH         print a GGUF file's or Hugging Face directory's format,\n"
               "                         architecture, config, tokenizer and tensors, and exit\n"
               "                         (the report of inferd-worker --inspect; no --model)\n"
               "  --json                 with --inspect: one JSON object\n"
               "  -h, --help             this help\n"
               "  -V, --version          print the version\n"
               "\n"
               "Settings (flag = config key with '-' for '_'; [r] = reloaded on SIGHUP):\n");
    for (size_t i = 0; i < IFD__N_KEYS; i++) {
        const ifd_cfg_key_t *k = &ifd__keys[i];
        char flag[128];
        char name[96];
        size_t j;
        for (j = 0; k->name[j] && j + 1 < sizeof name; j++)
            name[j] = k->name[j] == '_' ? '-' : k->name[j];
        name[j] = '\0';
        if (k->type == IFD_CFG_BOOL)
            snprintf(flag, sizeof flag, "--[no-]%s", name);
        else
            snprintf(flag, sizeof flag, "--%s %s", name, k->arg ? k->arg : "V");
        char text[512];
        snprintf(text, sizeof text, "%s%s (%s, default %s%s%s)", k->reloadable ? "[r] " : "",
                 k->help, ifd__type_name(k->type), k->def[0] ? "" : "\"", k->def,
                 k->def[0] ? "" : "\"");
        /* wrap the text at 100 columns under a 33-column flag field */
        fprintf(f, "  %-30s", flag);
        int col = 32 > (int)strlen(flag) + 2 ? 32 : (int)strlen(flag) + 2;
        const char *w = text;
        while (*w) {
            size_t wl = strcspn(w, " ");
            if (col + 1 + (int)wl > 100 && col > 33) {
                fprintf(f, "\n%33s", "");
                col = 33;
            } else {
                fputc(' ', f);
                col++;
            }
            fwrite(w, 1, wl, f);
            col += (int)wl;
            w += wl;
            while (*w == ' ')
                w++;
        }
        fputc('\n', f);
    }
    fprintf(f, "\nSignals: SIGTERM drains and exits 0; SIGHUP reopens the log file and reloads\n"
               "the [r] settings. Docs: docs/configuration.md, docs/api.md, docs/deploy.md.\n");
}

int ifd_config_print_json(const ifd_config_t *c, FILE *f)
{
    json_t *o = json_object();
    if (!o)
        return IFD_ENOMEM;
    for (size_t i = 0; i < IFD__N_KEYS; i++) {
        const ifd_cfg_key_t *k = &ifd__keys[i];
        const void *v = ifd__field(c, k);
        json_t *j = NULL;
        switch (k->type) {
        case IFD_CFG_STR: {
            const char *s = *(char *const *)v;
            if (!strcmp(k->name, "api_key") && s && *s)
                s = "***";
            j = json_string(s ? s : "");
            break;
        }
        case IFD_CFG_INT:
            j = json_integer(*(const int64_t *)v);
            break;
        case IFD_CFG_BYTES:
            j = json_integer((json_int_t) * (const uint64_t *)v);
            break;
        case IFD_CFG_BOOL:
            j = json_boolean(*(const bool *)v);
            break;
        case IFD_CFG_SECS:
        case IFD_CFG_NUM:
            j = json_real(*(const double *)v);
            break;
        }
        json_object_set_new(o, k->name, j);
    }
    int rc = json_dumpf(o, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER) ? IFD_ENOMEM : 0;
    fputc('\n', f);
    json_decref(o);
    return rc;
}
