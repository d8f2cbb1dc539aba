/*
 * inspect.c — see inspect.h. The report is assembled as a jansson object
 * first; the text form is printed from the same object, so both forms always
 * carry the same facts.
 */
#include "inspect.h"
#include "error.h"
#include "model_source.h"
#include "safetensors.h"
#include "tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>

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
    json_object_set_new(root, "format", json_string("gguf"));
    json_object_set_new(root, "source", json_string(ifd_gguf_path(g)));
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

static json_t *ifd__tok_json(const ifd_tokenizer_t *t, ifd_token_t id)
{
    if (id < 0)
        return NULL;
    json_t *o = json_object();
    size_t len = 0;
    const char *text = ifd_tokenizer_token_text(t, id, &len);
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "text", text ? json_stringn(text, len) : json_null());
    return o;
}

/* The report of a Hugging Face directory: the resolved config (what inferd will run),
 * the tokenizer as loaded, generation_config.json's defaults, the safetensors tensors. */
static json_t *ifd__build_hf(const ifd_model_source_t *src, const ifd_tokenizer_t *tok)
{
    const ifd_model_config_t *c = ifd_model_source_config(src);
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("hf"));
    json_object_set_new(root, "source", json_string(ifd_model_source_path(src)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)ifd_model_source_bytes(src)));
    json_object_set_new(root, "architecture", json_string(c->arch_name));
    json_object_set_new(root, "hf_architecture", json_string(c->hf_arch));
    json_object_set_new(root, "name", json_string(c->name));
    json_object_set_new(root, "dtype", c->dtype[0] ? json_string(c->dtype) : json_null());
    const ifd_safetensors_t *st = ifd_model_source_safetensors(src);
    json_t *files = json_array();
    for (size_t i = 0; i < ifd_safetensors_n_files(st); i++)
        json_array_append_new(files, json_string(ifd_safetensors_file(st, i)));
    json_object_set_new(root, "files", files);

    json_t *hp = json_object();
    uint32_t n_local = 0;
    for (uint32_t l = 0; l < c->n_layer; l++)
        n_local += c->sliding_window > 0 && c->layer_is_local[l];
    struct {
        const char *name;
        json_t *v;
    } tab[] = {
        {"context_length", json_integer(c->n_ctx_train)},
        {"embedding_length", json_integer(c->n_embd)},
        {"block_count", json_integer(c->n_layer)},
        {"feed_forward_length", json_integer(c->n_ff)},
        {"head_count", json_integer(c->n_head)},
        {"head_count_kv", json_integer(c->n_head_kv)},
        {"head_dim", json_integer(c->head_dim)},
        {"rms_norm_eps", json_real(c->rms_eps)},
        {"rope_freq_base", json_real(c->rope_base)},
        {"rope_freq_scale", json_real(c->rope_freq_scale)},
        {"rope_llama3_factors", json_boolean(c->has_rope_freqs)},
        {"rope_freq_base_local", json_real(c->rope_base_local)},
        {"sliding_window", json_integer(c->sliding_window)},
        {"local_layers", json_integer(n_local)},
        {"attention_scale", json_real(c->attn_scale)},
        {"embedding_scale", json_real(c->embd_scale)},
        {"final_logit_softcap", json_real(c->final_logit_softcap)},
        {"qkv_bias", json_boolean(c->has_attn_bias)},
        {"qk_norm", json_boolean(c->has_qk_norm)},
        {"tied_embeddings", json_boolean(c->tied_embeddings)},
        {"vocab_size", json_integer(c->n_vocab)},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        json_object_set_new(hp, tab[i].name, tab[i].v);
    json_object_set_new(root, "hparams", hp);

    json_t *tj = json_object();
    json_object_set_new(tj, "model", json_string(ifd_tokenizer_model(tok) == IFD_TOKMODEL_BPE
                                                     ? "bpe"
                                                     : "spm"));
    json_object_set_new(tj, "pre", json_string(ifd_tokenizer_pre(tok)));
    json_object_set_new(tj, "vocab_size", json_integer(ifd_tokenizer_n_vocab(tok)));
    json_t *o;
    if ((o = ifd__tok_json(tok, ifd_tokenizer_bos(tok))))
        json_object_set_new(tj, "bos", o);
    if ((o = ifd__tok_json(tok, ifd_tokenizer_eos(tok))))
        json_object_set_new(tj, "eos", o);
    if ((o = ifd__tok_json(tok, ifd_tokenizer_eot(tok))))
        json_object_set_new(tj, "eot", o);
    json_object_set_new(tj, "add_bos_token", json_boolean(ifd_tokenizer_add_bos(tok)));
    const char *tmpl = ifd_tokenizer_chat_template(tok);
    json_object_set_new(tj, "chat_template", json_boolean(tmpl != NULL));
    json_object_set_new(tj, "chat_template_bytes", json_integer(tmpl ? (json_int_t)strlen(tmpl) : 0));
    const ifd_token_t *eog;
    size_t n_eog = ifd_tokenizer_eog_ids(tok, &eog);
    json_t *ea = json_array();
    for (size_t i = 0; i < n_eog; i++)
        json_array_append_new(ea, json_integer(eog[i]));
    json_object_set_new(tj, "eog_ids", ea);
    json_object_set_new(root, "tokenizer", tj);

    if (c->gen.present) {
        json_t *g = json_object();
        json_object_set_new(g, "do_sample", json_boolean(c->gen.do_sample));
        if (c->gen.temperature >= 0)
            json_object_set_new(g, "temperature", json_real(c->gen.temperature));
        if (c->gen.top_p >= 0)
            json_object_set_new(g, "top_p", json_real(c->gen.top_p));
        if (c->gen.top_k >= 0)
            json_object_set_new(g, "top_k", json_integer(c->gen.top_k));
        json_t *ids = json_array();
        for (uint32_t i = 0; i < c->gen.n_eos; i++)
            json_array_append_new(ids, json_integer(c->gen.eos_ids[i]));
        json_object_set_new(g, "eos_token_id", ids);
        json_object_set_new(root, "generation", g);
    }

    json_t *tensors = json_array();
    uint64_t total = 0;
    for (size_t i = 0; i < ifd_safetensors_count(st); i++) {
        const ifd_st_tensor_t *t = ifd_safetensors_at(st, i);
        json_t *to = json_object();
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(to, "name", json_string(t->name));
        json_object_set_new(to, "type", json_string(t->dtype));
        json_object_set_new(to, "shape", shape);
        json_object_set_new(to, "bytes", json_integer((json_int_t)t->nbytes));
        json_array_append_new(tensors, to);
        total += t->nbytes;
    }
    json_object_set_new(root, "tensor_count", json_integer((json_int_t)ifd_safetensors_count(st)));
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
    const bool hf = strcmp(json_string_value(json_object_get(r, "format")), "hf") == 0;
    if (hf)
        fprintf(out, "source:         %s (Hugging Face directory, %zu safetensors file(s), "
                "%.1f MiB)\n",
                json_string_value(json_object_get(r, "source")),
                json_array_size(json_object_get(r, "files")), mib);
    else
        fprintf(out, "file:           %s (%.1f MiB, GGUF v%" JSON_INTEGER_FORMAT ", alignment %"
                JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT " metadata keys)\n",
                json_string_value(json_object_get(r, "file")), mib,
                json_integer_value(json_object_get(r, "gguf_version")),
                json_integer_value(json_object_get(r, "alignment")),
                json_integer_value(json_object_get(r, "metadata_count")));
    fprintf(out, "format:         %s\n", hf ? "hf" : "gguf");
    fprintf(out, "architecture:   ");
    ifd__print_scalar(out, json_object_get(r, "architecture"));
    if (hf) {
        fprintf(out, " (");
        ifd__print_scalar(out, json_object_get(r, "hf_architecture"));
        fprintf(out, ")\ndtype:          ");
        ifd__print_scalar(out, json_object_get(r, "dtype"));
    }
    fprintf(out, "\nname:           ");
    ifd__print_scalar(out, json_object_get(r, "name"));
    if (!hf) {
        fprintf(out, "\nfile type:      ");
        ifd__print_scalar(out, json_object_get(r, "file_type"));
    }
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
    json_t *gen = json_object_get(r, "generation");
    if (gen) {
        fprintf(out, "\ngeneration_config.json:\n");
        json_object_foreach(gen, k, v)
        {
            fprintf(out, "  %-22s ", k);
            ifd__print_scalar(out, v);
            fputc('\n', out);
        }
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

static int ifd__emit(FILE *out, json_t *r, bool json)
{
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

int ifd_inspect_write(FILE *out, const ifd_gguf_t *g, bool json)
{
    return ifd__emit(out, ifd__build(g), json);
}

int ifd_inspect_source(FILE *out, const ifd_model_source_t *src, const ifd_tokenizer_t *tok,
                       bool json)
{
    if (ifd_model_source_gguf(src))
        return ifd_inspect_write(out, ifd_model_source_gguf(src), json);
    return ifd__emit(out, ifd__build_hf(src, tok), json);
}

int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json)
{
    ifd_gguf_t *g;
    char msg[1024];
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        ifd_model_source_t *src;
        ifd_tokenizer_t *tok;
        int rc = ifd_model_source_open(&src, path, msg, sizeof msg);
        if (rc) {
            fprintf(err, "error: %s\n", msg);
            return rc;
        }
        if ((rc = ifd_model_source_tokenizer(src, &tok, msg, sizeof msg))) {
            fprintf(err, "error: tokenizer: %s\n", msg);
            ifd_model_source_close(src);
            return rc;
        }
        rc = ifd_inspect_source(out, src, tok, json);
        ifd_tokenizer_destroy(tok);
        ifd_model_source_close(src);
        return rc;
    }
    int rc = ifd_gguf_open(&g, path, msg, sizeof msg);
    if (rc) {
        fprintf(err, "error: %s\n", msg);
        return rc;
    }
    rc = ifd_inspect_write(out, g, json);
    ifd_gguf_close(g);
    return rc;
}
