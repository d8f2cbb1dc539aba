/*
 * inspect.c — see inspect.h. The report is assembled as a jansson object
 * first; the text form is printed from the same object, so both forms always
 * carry the same facts.
 */
#include "inspect.h"
#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>

/* Hyper-parameters reported, as {json name, key suffix after "<arch>."}. */
static const struct {
    const char *name;
    const char *suffix;
} ifd__hparams[] = {
    {"context_length", "context_length"},
    {"embedding_length", "embedding_length"},
    {"block_count", "block_count"},
    {"feed_forward_length", "feed_forward_length"},
    {"head_count", "attention.head_count"},
    {"head_count_kv", "attention.head_count_kv"},
    {"key_length", "attention.key_length"},
    {"value_length", "attention.value_length"},
    {"rms_norm_eps", "attention.layer_norm_rms_epsilon"},
    {"rope_dimension_count", "rope.dimension_count"},
    {"rope_freq_base", "rope.freq_base"},
    {"rope_scaling_type", "rope.scaling.type"},
    {"rope_scaling_factor", "rope.scaling.factor"},
    {"sliding_window", "attention.sliding_window"},
    {"vocab_size", "vocab_size"},
};

/* Special token ids reported, as {json name, key}. */
static const struct {
    const char *name;
    const char *key;
} ifd__special[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},     {"unk", "tokenizer.ggml.unknown_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
};

static json_t *ifd__str_json(ifd_str_t s)
{
    return json_stringn_nocheck(s.ptr, s.len);
}

/* A metadata value as JSON; arrays are summarized past `max_elems`. */
static json_t *ifd__value_json(const ifd_gguf_t *g, const ifd_gguf_value_t *v, size_t max_elems)
{
    switch (v->type) {
    case IFD_GGUF_UINT8:
    case IFD_GGUF_UINT16:
    case IFD_GGUF_UINT32:
    case IFD_GGUF_UINT64:
        return json_integer((json_int_t)v->v.u);
    case IFD_GGUF_INT8:
    case IFD_GGUF_INT16:
    case IFD_GGUF_INT32:
    case IFD_GGUF_INT64:
        return json_integer((json_int_t)v->v.i);
    case IFD_GGUF_FLOAT32:
    case IFD_GGUF_FLOAT64:
        return json_real(v->v.f);
    case IFD_GGUF_BOOL:
        return json_boolean(v->v.b);
    case IFD_GGUF_STRING:
        return ifd__str_json(v->v.s);
    case IFD_GGUF_ARRAY: {
        json_t *a = json_array();
        uint64_t n = v->v.arr.count < max_elems ? v->v.arr.count : max_elems;
        for (uint64_t i = 0; i < n; i++) {
            ifd_gguf_value_t e;
            if (ifd_gguf_arr_get(g, v, i, &e) == 0)
                json_array_append_new(a, ifd__value_json(g, &e, max_elems));
        }
        return a;
    }
    default:
        return json_null();
    }
}

static json_t *ifd__token_text(const ifd_gguf_t *g, const ifd_gguf_value_t *tokens, uint64_t id)
{
    ifd_str_t s;
    if (!tokens || ifd_gguf_arr_str(g, tokens, id, &s) != 0)
        return json_null();
    return ifd__str_json(s);
}

static json_t *ifd__build(const ifd_gguf_t *g)
{
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(ifd_gguf_path(g)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)ifd_gguf_file_size(g)));
    json_object_set_new(root, "gguf_version", json_integer(ifd_gguf_version(g)));
    json_object_set_new(root, "alignment", json_integer(ifd_gguf_alignment(g)));
    json_object_set_new(root, "metadata_count", json_integer((json_int_t)ifd_gguf_kv_count(g)));

    ifd_str_t arch = {"", 0}, s;
    ifd_gguf_get_str(g, "general.architecture", &arch);
    json_object_set_new(root, "architecture", arch.len ? ifd__str_json(arch) : json_null());
    json_object_set_new(root, "name",
                        ifd_gguf_get_str(g, "general.name", &s) == 0 ? ifd__str_json(s)
                                                                      : json_null());
    uint32_t ft;
    json_object_set_new(root, "file_type",
                        ifd_gguf_get_u32(g, "general.file_type", &ft) == 0 ? json_integer(ft)
                                                                            : json_null());

    json_t *hp = json_object();
    char key[256];
    for (size_t i = 0; i < sizeof ifd__hparams / sizeof ifd__hparams[0]; i++) {
        snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.ptr, ifd__hparams[i].suffix);
        const ifd_gguf_value_t *v = ifd_gguf_get(g, key);
        if (v)
            json_object_set_new(hp, ifd__hparams[i].name, ifd__value_json(g, v, 256));
    }
    json_object_set_new(root, "hparams", hp);

    json_t *tok = json_object();
    const ifd_gguf_value_t *tokens = NULL, *merges = NULL;
    ifd_gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens);
    ifd_gguf_get_arr(g, "tokenizer.ggml.merges", &merges);
    json_object_set_new(tok, "model", ifd_gguf_get_str(g, "tokenizer.ggml.model", &s) == 0
                                          ? ifd__str_json(s)
                                          : json_null());
    json_object_set_new(tok, "pre", ifd_gguf_get_str(g, "tokenizer.ggml.pre", &s) == 0
                                        ? ifd__str_json(s)
                                        : json_null());
    json_object_set_new(tok, "vocab_size",
                        json_integer(tokens ? (json_int_t)tokens->v.arr.count : 0));
    json_object_set_new(tok, "merges", json_integer(merges ? (json_int_t)merges->v.arr.count : 0));
    for (size_t i = 0; i < sizeof ifd__special / sizeof ifd__special[0]; i++) {
        uint32_t id;
        if (ifd_gguf_get_u32(g, ifd__special[i].key, &id) != 0)
            continue;
        json_t *sp = json_object();
        json_object_set_new(sp, "id", json_integer(id));
        json_object_set_new(sp, "text", ifd__token_text(g, tokens, id));
        json_object_set_new(tok, ifd__special[i].name, sp);
    }
    bool b;
    if (ifd_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0)
        json_object_set_new(tok, "add_bos_token", json_boolean(b));
    if (ifd_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == 0)
        json_object_set_new(tok, "add_space_prefix", json_boolean(b));
    bool has_tmpl = ifd_gguf_get_str(g, "tokenizer.chat_template", &s) == 0;
    json_object_set_new(tok, "chat_template", json_boolean(has_tmpl));
    json_object_set_new(tok, "chat_template_bytes", json_integer(has_tmpl ? (json_int_t)s.len : 0));
    json_object_set_new(root, "tokenizer", tok);

    json_t *tensors = json_array();
    uint64_t total = 0;
    for (uint64_t i = 0; i < ifd_gguf_tensor_count(g); i++) {
        const ifd_gguf_tensor_t *t = ifd_gguf_tensor(g, i);
        json_t *o = json_object();
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->ne[d]));
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "type", json_string(ifd_ggml_type_name(t->type)));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "bytes", json_integer((json_int_t)t->nbytes));
        json_array_append_new(tensors, o);
        total += t->nbytes;
    }
    json_object_set_new(root, "tensor_count", json_integer((json_int_t)ifd_gguf_tensor_count(g)));
    json_object_set_new(root, "tensor_bytes", json_integer((json_int_t)total));
    json_object_set_new(root, "tensors", tensors);
    return root;
}

static void ifd__print_scalar(FILE *out, const json_t *v)
{
    if (json_is_string(v))
        fprintf(out, "%s", json_string_value(v));
    else if (json_is_integer(v))
        fprintf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    else if (json_is_real(v))
        fprintf(out, "%g", json_real_value(v));
    else if (json_is_boolean(v))
        fprintf(out, "%s", json_is_true(v) ? "true" : "false");
    else if (json_is_null(v))
        fprintf(out, "-");
    else {
        char *d = json_dumps(v, JSON_COMPACT);
        fprintf(out, "%s", d ? d : "?");
        free(d);
    }
}

/* Prints a string with control characters escaped, so tokens like "\n" stay
 * on one line. */
static void ifd__print_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '\n')
            fputs("\\n", out);
        else if (ch == '\t')
            fputs("\\t", out);
        else if (ch < 0x20)
            fprintf(out, "\\x%02x", ch);
        else
            fputc(ch, out);
    }
}

static void ifd__print_text(FILE *out, const json_t *r)
{
    double mib = (double)json_integer_value(json_object_get(r, "file_size")) / (1024.0 * 1024.0);
    fprintf(out, "file:           %s (%.1f MiB, GGUF v%" JSON_INTEGER_FORMAT ", alignment %"
            JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " metadata keys)\n",
            json_string_value(json_object_get(r, "file")), mib,
            json_integer_value(json_object_get(r, "gguf_version")),
            json_integer_value(json_object_get(r, "alignment")),
            json_integer_value(json_object_get(r, "metadata_count")));
    fprintf(out, "architecture:   ");
    ifd__print_scalar(out, json_object_get(r, "architecture"));
    fprintf(out, "\nname:           ");
    ifd__print_scalar(out, json_object_get(r, "name"));
    fprintf(out, "\nfile type:      ");
    ifd__print_scalar(out, json_object_get(r, "file_type"));
    fprintf(out, "\n\nhyper-parameters:\n");
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(r, "hparams"), k, v)
    {
        fprintf(out, "  %-22s ", k);
        ifd__print_scalar(out, v);
        fputc('\n', out);
    }
    json_t *tok = json_object_get(r, "tokenizer");
    fprintf(out, "\ntokenizer:\n");
    json_object_foreach(tok, k, v)
    {
        fprintf(out, "  %-22s ", k);
        if (json_is_object(v)) {
            fprintf(out, "%" JSON_INTEGER_FORMAT " ", json_integer_value(json_object_get(v, "id")));
            json_t *text = json_object_get(v, "text");
            if (json_is_string(text)) {
                fputc('\'', out);
                ifd__print_escaped(out, json_string_value(text));
                fputc('\'', out);
            }
        } else {
            ifd__print_scalar(out, v);
        }
        fputc('\n', out);
    }
    json_t *tensors = json_object_get(r, "tensors");
    fprintf(out, "\ntensors: %zu, %.1f MiB\n", json_array_size(tensors),
            (double)json_integer_value(json_object_get(r, "tensor_bytes")) / (1024.0 * 1024.0));
    fprintf(out, "  %-36s %-7s %-22s %12s\n", "name", "type", "shape", "bytes");
    size_t i;
    json_array_foreach(tensors, i, v)
    {
        char shape[64] = "";
        size_t j, off = 0;
        json_t *d;
        json_array_foreach(json_object_get(v, "shape"), j, d)
        {
            off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%" JSON_INTEGER_FORMAT,
                                    j ? " x " : "", json_integer_value(d));
            if (off >= sizeof shape)
                break;
        }
        fprintf(out, "  %-36s %-7s %-22s %12" JSON_INTEGER_FORMAT "\n",
                json_string_value(json_object_get(v, "name")),
                json_string_value(json_object_get(v, "type")), shape,
                json_integer_value(json_object_get(v, "bytes")));
    }
}

int ifd_inspect_write(FILE *out, const ifd_gguf_t *g, bool json)
{
    json_t *r = ifd__build(g);
    if (!r)
        return IFD_ENOMEM;
    int rc = 0;
    if (json) {
        if (json_dumpf(r, out, JSON_INDENT(2) | JSON_ENSURE_ASCII) != 0)
            rc = IFD_ENOMEM;
        fputc('\n', out);
    } else {
        ifd__print_text(out, r);
    }
    json_decref(r);
    if (rc == 0 && (fflush(out) != 0 || ferror(out)))
        rc = -(errno ? errno : EIO);
    return rc;
}

int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json)
{
    ifd_gguf_t *g;
    char msg[1024];
    int rc = ifd_gguf_open(&g, path, msg, sizeof msg);
    if (rc) {
        fprintf(err, "error: %s\n", msg);
        return rc;
    }
    rc = ifd_inspect_write(out, g, json);
    ifd_gguf_close(g);
    return rc;
}
