/*
 * inspect.c — see inspect.h. The report is assembled as a jansson object
 * first; the text form is printed from the same object, so both forms always
 * carry the same facts.
 */
#include "inspect.h"
#include "error.h"
#include "modelfile/model_source.h"
#include "modelfile/safetensors.h"
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Hyper-parameters reported: the resolved config inferd will run, the same
 * rows for every format. */
typedef enum { IFD__U32, IFD__F32, IFD__BOOL } ifd__hp_kind_t;
#define IFD__HP(name, kind, field) {name, kind, offsetof(ifd_model_config_t, field)}
static const struct {
    const char *name;
    ifd__hp_kind_t kind;
    size_t off;
} ifd__hparams[] = {
    IFD__HP("context_length", IFD__U32, n_ctx_train),
    IFD__HP("embedding_length", IFD__U32, n_embd),
    IFD__HP("block_count", IFD__U32, n_layer),
    IFD__HP("feed_forward_length", IFD__U32, n_ff),
    IFD__HP("head_count", IFD__U32, n_head),
    IFD__HP("head_count_kv", IFD__U32, n_head_kv),
    IFD__HP("head_dim", IFD__U32, head_dim),
    IFD__HP("rope_dimension_count", IFD__U32, n_rot),
    IFD__HP("rms_norm_eps", IFD__F32, rms_eps),
    IFD__HP("rope_freq_base", IFD__F32, rope_base),
    IFD__HP("rope_freq_scale", IFD__F32, rope_freq_scale),
    IFD__HP("rope_neox", IFD__BOOL, rope_neox),
    IFD__HP("rope_llama3_factors", IFD__BOOL, has_rope_freqs),
    IFD__HP("rope_freq_base_local", IFD__F32, rope_base_local),
    IFD__HP("sliding_window", IFD__U32, sliding_window),
    IFD__HP("attention_scale", IFD__F32, attn_scale),
    IFD__HP("embedding_scale", IFD__F32, embd_scale),
    IFD__HP("final_logit_softcap", IFD__F32, final_logit_softcap),
    IFD__HP("qkv_bias", IFD__BOOL, has_attn_bias),
    IFD__HP("qk_norm", IFD__BOOL, has_qk_norm),
    IFD__HP("tied_embeddings", IFD__BOOL, tied_embeddings),
    IFD__HP("vocab_size", IFD__U32, n_vocab),
};

/* Special tokens reported, as {json name, accessor}. */
static const struct {
    const char *name;
    ifd_token_t (*get)(const ifd_tokenizer_t *t);
} ifd__special[] = {
    {"bos", ifd_tokenizer_bos}, {"eos", ifd_tokenizer_eos}, {"eot", ifd_tokenizer_eot},
    {"unk", ifd_tokenizer_unk}, {"pad", ifd_tokenizer_pad},
};

static json_t *ifd__hparams_json(const ifd_model_config_t *c)
{
    json_t *hp = json_object();
    for (size_t i = 0; i < sizeof ifd__hparams / sizeof ifd__hparams[0]; i++) {
        const void *f = (const char *)c + ifd__hparams[i].off;
        json_t *v = ifd__hparams[i].kind == IFD__U32   ? json_integer(*(const uint32_t *)f)
                    : ifd__hparams[i].kind == IFD__F32 ? json_real(*(const float *)f)
                                                       : json_boolean(*(const bool *)f);
        json_object_set_new(hp, ifd__hparams[i].name, v);
    }
    uint32_t n_local = 0;
    for (uint32_t l = 0; l < c->n_layer; l++)
        n_local += c->sliding_window > 0 && c->layer_is_local[l];
    json_object_set_new(hp, "local_layers", json_integer(n_local));
    return hp;
}

static json_t *ifd__tokenizer_json(const ifd_tokenizer_t *t)
{
    json_t *tj = json_object();
    json_object_set_new(tj, "model",
                        json_string(ifd_tokenizer_model(t) == IFD_TOKMODEL_BPE ? "gpt2" : "llama"));
    json_object_set_new(tj, "pre", json_string(ifd_tokenizer_pre(t)));
    json_object_set_new(tj, "vocab_size", json_integer(ifd_tokenizer_n_vocab(t)));
    for (size_t i = 0; i < sizeof ifd__special / sizeof ifd__special[0]; i++) {
        ifd_token_t id = ifd__special[i].get(t);
        if (id < 0)
            continue;
        json_t *o = json_object();
        size_t len = 0;
        const char *text = ifd_tokenizer_token_text(t, id, &len);
        json_object_set_new(o, "id", json_integer(id));
        json_object_set_new(o, "text", text ? json_stringn(text, len) : json_null());
        json_object_set_new(tj, ifd__special[i].name, o);
    }
    json_object_set_new(tj, "add_bos_token", json_boolean(ifd_tokenizer_add_bos(t)));
    const char *tmpl = ifd_tokenizer_chat_template(t);
    json_object_set_new(tj, "chat_template", json_boolean(tmpl != NULL));
    json_object_set_new(tj, "chat_template_bytes",
                        json_integer(tmpl ? (json_int_t)strlen(tmpl) : 0));
    const ifd_token_t *eog;
    size_t n_eog = ifd_tokenizer_eog_ids(t, &eog);
    json_t *ea = json_array();
    for (size_t i = 0; i < n_eog; i++)
        json_array_append_new(ea, json_integer(eog[i]));
    json_object_set_new(tj, "eog_ids", ea);
    return tj;
}

/* generation_config.json's defaults (HF only; NULL when absent). */
static json_t *ifd__generation_json(const ifd_gen_defaults_t *g)
{
    if (!g->present)
        return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "do_sample", json_boolean(g->do_sample));
    const struct {
        const char *name;
        float v;
    } f[] = {{"temperature", g->temperature},
             {"top_p", g->top_p},
             {"min_p", g->min_p},
             {"repetition_penalty", g->repetition_penalty}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v >= 0)
            json_object_set_new(o, f[i].name, json_real(f[i].v));
    if (g->top_k >= 0)
        json_object_set_new(o, "top_k", json_integer(g->top_k));
    if (g->max_new_tokens > 0)
        json_object_set_new(o, "max_new_tokens", json_integer(g->max_new_tokens));
    json_t *ids = json_array();
    for (uint32_t i = 0; i < g->n_eos; i++)
        json_array_append_new(ids, json_integer(g->eos_ids[i]));
    json_object_set_new(o, "eos_token_id", ids);
    return o;
}

/* One tensor as the file stores it (GGUF: ggml type, shape innermost first;
 * safetensors: dtype, shape outermost first). */
typedef struct {
    const char *name, *type;
    uint32_t n_dims;
    const int64_t *shape_i64;  /* safetensors */
    const uint64_t *shape_u64; /* GGUF */
    uint64_t bytes;
} ifd__tensor_row_t;

/* The weights a report lists: a GGUF file's tensors, or safetensors shards
 * (either may be NULL: none). */
typedef struct {
    const ifd_gguf_t *g;
    const ifd_safetensors_t *st;
} ifd__weights_t;

static size_t ifd__n_tensors(ifd__weights_t w)
{
    return w.g ? (size_t)ifd_gguf_tensor_count(w.g) : w.st ? ifd_safetensors_count(w.st) : 0;
}

static ifd__tensor_row_t ifd__tensor_row(ifd__weights_t w, size_t i)
{
    if (w.g) {
        const ifd_gguf_tensor_t *t = ifd_gguf_tensor(w.g, i);
        return (ifd__tensor_row_t){t->name, ifd_ggml_type_name(t->type), t->n_dims, NULL, t->ne,
                                   t->nbytes};
    }
    const ifd_st_tensor_t *t = ifd_safetensors_at(w.st, i);
    return (ifd__tensor_row_t){t->name, t->dtype, t->n_dims, t->shape, NULL, t->nbytes};
}

/* GGUF's container facts. */
static void ifd__gguf_facts(json_t *root, const ifd_gguf_t *g)
{
    uint32_t ft;
    json_object_set_new(root, "gguf_version", json_integer(ifd_gguf_version(g)));
    json_object_set_new(root, "alignment", json_integer(ifd_gguf_alignment(g)));
    json_object_set_new(root, "metadata_count", json_integer((json_int_t)ifd_gguf_kv_count(g)));
    json_object_set_new(root, "file_type", ifd_gguf_get_u32(g, "general.file_type", &ft) == 0
                                               ? json_integer(ft)
                                               : json_null());
}

/* What only the format has: GGUF's container facts, HF's class, dtype and shards. */
static void ifd__format_facts(json_t *root, const ifd_model_source_t *src)
{
    const ifd_gguf_t *g = ifd_model_source_gguf(src);
    const ifd_model_config_t *c = ifd_model_source_config(src);
    if (g) {
        ifd__gguf_facts(root, g);
        return;
    }
    json_object_set_new(root, "hf_architecture", json_string(c->hf_arch));
    json_object_set_new(root, "dtype", c->dtype[0] ? json_string(c->dtype) : json_null());
}

/* Every tensor as the file stores it, their count and bytes. */
static void ifd__tensors(json_t *root, ifd__weights_t w)
{
    json_t *tensors = json_array();
    uint64_t total = 0;
    size_t n = ifd__n_tensors(w);
    for (size_t i = 0; i < n; i++) {
        ifd__tensor_row_t t = ifd__tensor_row(w, i);
        json_t *o = json_object(), *shape = json_array();
        for (uint32_t d = 0; d < t.n_dims; d++)
            json_array_append_new(shape, json_integer(t.shape_u64 ? (json_int_t)t.shape_u64[d]
                                                                  : (json_int_t)t.shape_i64[d]));
        json_object_set_new(o, "name", json_string(t.name));
        json_object_set_new(o, "type", json_string(t.type));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "bytes", json_integer((json_int_t)t.bytes));
        json_array_append_new(tensors, o);
        total += t.bytes;
    }
    json_object_set_new(root, "tensor_count", json_integer((json_int_t)n));
    json_object_set_new(root, "tensor_bytes", json_integer((json_int_t)total));
    json_object_set_new(root, "tensors", tensors);
}

/* The vision tower (Gemma 3 with vision_config, or an mmproj GGUF): its
 * shape and tokens per image, or {"usable": false, "reason": …} when the
 * file has one inferd cannot run; nothing when v and why are NULL. */
static void ifd__vision_json(json_t *root, const ifd_vision_config_t *v, const char *why)
{
    if (!v && !why)
        return;
    json_t *o = json_object();
    json_object_set_new(o, "usable", json_boolean(v != NULL));
    if (!v) {
        json_object_set_new(o, "reason", json_string(why));
        json_object_set_new(root, "vision", o);
        return;
    }
    static const struct {
        const char *key;
        size_t off;
    } keys[] = {
        {"image_size", offsetof(ifd_vision_config_t, image_size)},
        {"patch_size", offsetof(ifd_vision_config_t, patch_size)},
        {"width", offsetof(ifd_vision_config_t, n_embd)},
        {"ffn_width", offsetof(ifd_vision_config_t, n_ff)},
        {"layers", offsetof(ifd_vision_config_t, n_layer)},
        {"heads", offsetof(ifd_vision_config_t, n_head)},
        {"head_dim", offsetof(ifd_vision_config_t, head_dim)},
        {"tokens_per_image", offsetof(ifd_vision_config_t, tokens_per_image)},
        {"projection_width", offsetof(ifd_vision_config_t, text_embd)},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        json_object_set_new(o, keys[i].key,
                            json_integer(*(const uint32_t *)((const char *)v + keys[i].off)));
    json_object_set_new(o, "patches", json_integer(ifd_vision_n_patches(v)));
    json_object_set_new(o, "pool", json_integer(ifd_vision_pool(v)));
    json_object_set_new(o, "layer_norm_eps", json_real(v->eps));
    json_object_set_new(o, "boi_token_id", json_integer(v->boi_id));
    json_object_set_new(o, "eoi_token_id", json_integer(v->eoi_id));
    json_object_set_new(o, "image_token_id", json_integer(v->image_id));
    json_object_set_new(root, "vision", o);
}

static void ifd__vision(json_t *root, const ifd_model_source_t *src)
{
    const char *why = NULL;
    const ifd_vision_config_t *v = ifd_model_source_vision(src, &why);
    ifd__vision_json(root, v, why);
}

/* servable: null reason → yes. */
static void ifd__servable(json_t *root, const char *why)
{
    json_object_set_new(root, "servable", json_boolean(why == NULL));
    json_object_set_new(root, "not_servable_reason", why ? json_string(why) : json_null());
}

/* The report: the same facts, from the same accessors, for both formats
 * (tok NULL: the tokenizer did not load, why_not says so). */
static json_t *ifd__build(const ifd_model_source_t *src, const ifd_tokenizer_t *tok,
                          const char *why_not)
{
    const ifd_model_config_t *c = ifd_model_source_config(src);
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(ifd_model_format_name(c->format)));
    json_object_set_new(root, "source", json_string(ifd_model_source_path(src)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)ifd_model_source_bytes(src)));
    json_t *files = json_array();
    const ifd_safetensors_t *st = ifd_model_source_safetensors(src);
    for (size_t i = 0; i < ifd_model_source_n_files(src); i++)
        json_array_append_new(files, json_string(st ? ifd_safetensors_file(st, i)
                                                    : ifd_model_source_path(src)));
    json_object_set_new(root, "files", files);
    json_object_set_new(root, "architecture", json_string(c->arch_name));
    json_object_set_new(root, "name", c->name[0] ? json_string(c->name) : json_null());
    ifd__format_facts(root, src);
    json_object_set_new(root, "hparams", ifd__hparams_json(c));
    ifd__vision(root, src);
    json_object_set_new(root, "tokenizer", tok ? ifd__tokenizer_json(tok) : json_null());
    json_t *gen = ifd__generation_json(&c->gen);
    if (gen)
        json_object_set_new(root, "generation", gen);
    ifd__servable(root, why_not);
    ifd__tensors(root, (ifd__weights_t){ifd_model_source_gguf(src),
                                        ifd_model_source_safetensors(src)});
    return root;
}

/* ---- files inferd cannot serve ---------------------------------------------------------- */

/* One GGUF metadata value as the report shows it: scalars as they are
 * (strings cut at 120 bytes), arrays as "[N × TYPE]". */
static json_t *ifd__gguf_value_json(const ifd_gguf_value_t *v)
{
    static const char *const k_types[IFD_GGUF_TYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "array", "u64", "i64", "f64"};
    char buf[64];
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
        return json_stringn_nocheck(v->v.s.ptr, v->v.s.len < 120 ? v->v.s.len : 120);
    case IFD_GGUF_ARRAY:
        snprintf(buf, sizeof buf, "[%" PRIu64 " x %s]", v->v.arr.count,
                 v->v.arr.elem < IFD_GGUF_TYPE_COUNT ? k_types[v->v.arr.elem] : "?");
        return json_string(buf);
    default:
        return json_null();
    }
}

/* A GGUF string value as a JSON string, or null. */
static json_t *ifd__gguf_str(const ifd_gguf_t *g, const char *key)
{
    ifd_str_t v;
    return ifd_gguf_get_str(g, key, &v) == 0 ? json_stringn_nocheck(v.ptr, v.len) : json_null();
}

/* A well-formed GGUF inferd cannot serve (another architecture, a vocabulary
 * alone, …): its container facts, every metadata pair, the tokenizer when it
 * loads, the tensors. */
static json_t *ifd__build_gguf(const ifd_gguf_t *g, const ifd_tokenizer_t *tok, const char *why)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("gguf"));
    json_object_set_new(root, "source", json_string(ifd_gguf_path(g)));
    json_object_set_new(root, "file_size", json_integer((json_int_t)ifd_gguf_file_size(g)));
    json_object_set_new(root, "files", json_pack("[s]", ifd_gguf_path(g)));
    json_object_set_new(root, "architecture", ifd__gguf_str(g, "general.architecture"));
    json_object_set_new(root, "name", ifd__gguf_str(g, "general.name"));
    ifd__gguf_facts(root, g);
    json_t *md = json_object();
    for (uint64_t i = 0; i < ifd_gguf_kv_count(g); i++)
        json_object_set_new(md, ifd_gguf_kv_key(g, i),
                            ifd__gguf_value_json(ifd_gguf_kv_value(g, i)));
    json_object_set_new(root, "metadata", md);
    json_object_set_new(root, "tokenizer", tok ? ifd__tokenizer_json(tok) : json_null());
    ifd__servable(root, why);
    ifd__tensors(root, (ifd__weights_t){g, NULL});
    return root;
}

/* config.json's top-level scalars (what describes an architecture inferd
 * does not know: sizes, ids, dtype). */
static json_t *ifd__hf_config_json(const json_t *cfg)
{
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cfg, k, v)
    {
        if (!json_is_object(v) && !json_is_array(v))
            json_object_set(o, k, v);
    }
    return o;
}

/* A Hugging Face directory inferd cannot serve: config.json's class, type
 * and scalars, the tokenizer when it loads, the shards' tensors when there
 * are any (st NULL: none). */
static json_t *ifd__build_hf(const char *dir, const json_t *cfg, const ifd_safetensors_t *st,
                             const ifd_tokenizer_t *tok, const char *why)
{
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("hf"));
    json_object_set_new(root, "source", json_string(dir));
    json_object_set_new(root, "file_size",
                        json_integer(st ? (json_int_t)ifd_safetensors_total_bytes(st) : 0));
    json_t *files = json_array();
    for (size_t i = 0; st && i < ifd_safetensors_n_files(st); i++)
        json_array_append_new(files, json_string(ifd_safetensors_file(st, i)));
    json_object_set_new(root, "files", files);
    json_t *mt = json_object_get(cfg, "model_type");
    json_object_set_new(root, "architecture", json_is_string(mt) ? json_incref(mt) : json_null());
    json_t *arch = json_array_get(json_object_get(cfg, "architectures"), 0);
    json_object_set_new(root, "hf_architecture",
                        json_is_string(arch) ? json_incref(arch) : json_null());
    json_t *dt = json_object_get(cfg, "torch_dtype");
    json_object_set_new(root, "dtype", json_is_string(dt) ? json_incref(dt) : json_null());
    json_object_set_new(root, "config", ifd__hf_config_json(cfg));
    json_object_set_new(root, "tokenizer", tok ? ifd__tokenizer_json(tok) : json_null());
    ifd__servable(root, why);
    ifd__tensors(root, (ifd__weights_t){NULL, st});
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

/* Top-level facts printed before the sections, in this order, when present. */
static const char *const ifd__header_keys[] = {
    "source", "format", "architecture", "hf_architecture", "name", "dtype", "file_size",
    "files", "gguf_version", "alignment", "metadata_count", "file_type",
};

/* An object's pairs, one a line, under a title (nothing when absent). */
static void ifd__print_section(FILE *out, const json_t *o, const char *title)
{
    if (!json_is_object(o))
        return;
    fprintf(out, "\n%s:\n", title);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        fprintf(out, "  %-22s ", k);
        if (json_is_string(v))
            ifd__print_escaped(out, json_string_value(v));
        else
            ifd__print_scalar(out, v);
        fputc('\n', out);
    }
}

static void ifd__print_text(FILE *out, const json_t *r)
{
    for (size_t i = 0; i < sizeof ifd__header_keys / sizeof ifd__header_keys[0]; i++) {
        const json_t *v = json_object_get(r, ifd__header_keys[i]);
        if (!v)
            continue;
        char label[32];
        snprintf(label, sizeof label, "%s:", ifd__header_keys[i]);
        fprintf(out, "%-15s ", label);
        if (json_is_array(v)) {
            size_t j;
            const json_t *f;
            json_array_foreach(v, j, f)
            {
                fprintf(out, "%s", j ? " " : "");
                ifd__print_scalar(out, f);
            }
        } else {
            ifd__print_scalar(out, v);
        }
        fputc('\n', out);
    }
    /* a line of its own: whether inferd can serve it, and why not */
    const json_t *why = json_object_get(r, "not_servable_reason");
    fprintf(out, "%-15s %s", "servable:", json_is_string(why) ? "no \u2014 " : "yes");
    if (json_is_string(why))
        ifd__print_escaped(out, json_string_value(why));
    fputc('\n', out);
    const char *k;
    json_t *v;
    ifd__print_section(out, json_object_get(r, "hparams"), "hyper-parameters");
    ifd__print_section(out, json_object_get(r, "vision"), "vision tower");
    ifd__print_section(out, json_object_get(r, "config"), "config.json");
    ifd__print_section(out, json_object_get(r, "metadata"), "metadata");
    json_t *tok = json_object_get(r, "tokenizer");
    fprintf(out, "\ntokenizer:%s\n", json_is_object(tok) ? "" : " none");
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

int ifd_inspect_source(FILE *out, const ifd_model_source_t *src, const ifd_tokenizer_t *tok,
                       bool json)
{
    return ifd__emit(out, ifd__build(src, tok, NULL), json);
}

/* Whether path is a file starting with the GGUF magic. */
static bool ifd__is_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char m[4] = {0};
    bool yes = f && fread(m, 1, 4, f) == 4 &&
               (uint32_t)(m[0] | m[1] << 8 | m[2] << 16 | (uint32_t)m[3] << 24) == IFD_GGUF_MAGIC;
    if (f)
        fclose(f);
    return yes;
}

/* A GGUF that did not open as a model (why): described if its container is
 * well-formed; the reader's error otherwise. */
static int ifd__inspect_gguf(FILE *out, FILE *err, const char *path, bool json, const char *why)
{
    char msg[1024];
    ifd_gguf_t *g;
    int rc = ifd_gguf_open(&g, path, msg, sizeof msg);
    if (rc) {
        fprintf(err, "error: %s\n", msg);
        return rc;
    }
    ifd_tokenizer_t *tok = NULL;
    if (ifd_tokenizer_create_gguf(&tok, g, msg, sizeof msg))
        tok = NULL; /* none, or one inferd cannot load: the report says none */
    char vocab[1200];
    if (ifd_gguf_tensor_count(g) == 0) { /* the loader's message names a missing key */
        snprintf(vocab, sizeof vocab, "no weights: a vocabulary-only file (%s)", why);
        why = vocab;
    }
    json_t *root = ifd__build_gguf(g, tok, why);
    ifd_vision_config_t vc; /* an mmproj: its tower (not servable alone) */
    int vrc = ifd_vision_config_from_gguf(&vc, g, msg, sizeof msg);
    if (vrc != IFD_ENOTFOUND)
        ifd__vision_json(root, vrc == 0 ? &vc : NULL, vrc == 0 ? NULL : msg);
    rc = ifd__emit(out, root, json);
    ifd_tokenizer_destroy(tok);
    ifd_gguf_close(g);
    return rc;
}

/* A Hugging Face directory (or its config.json) that did not open as a
 * model (why, code src_rc): described if config.json is JSON and the
 * shards, when there are any, are well-formed; an error otherwise. */
static int ifd__inspect_hf(FILE *out, FILE *err, const char *path, bool json, const char *why,
                           int src_rc)
{
    char dir[4096], cfgpath[4200], msg[1024];
    size_t n = strlen(path);
    const char *suffix = "config.json";
    if (n >= strlen(suffix) && !strcmp(path + n - strlen(suffix), suffix))
        n -= strlen(suffix);
    snprintf(dir, sizeof dir, "%.*s", (int)(n && path[n - 1] == '/' && n > 1 ? n - 1 : n),
             n ? path : ".");
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    json_t *cfg = json_load_file(cfgpath, 0, NULL);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        fprintf(err, "error: %s\n", why);
        return src_rc;
    }
    ifd_safetensors_t *st = NULL;
    int rc = ifd_safetensors_open(&st, dir, msg, sizeof msg);
    if (rc && rc != -ENOENT) { /* malformed shards are an error; none at all is a fact */
        json_decref(cfg);
        fprintf(err, "error: %s\n", msg);
        return rc;
    }
    ifd_tokenizer_t *tok = NULL;
    if (ifd_tokenizer_create_hf(&tok, dir, msg, sizeof msg))
        tok = NULL;
    rc = ifd__emit(out, ifd__build_hf(dir, cfg, rc ? NULL : st, tok, why), json);
    ifd_tokenizer_destroy(tok);
    ifd_safetensors_close(st);
    json_decref(cfg);
    return rc;
}

int ifd_inspect_file(FILE *out, FILE *err, const char *path, bool json)
{
    char msg[1024], why[1200];
    ifd_model_source_t *src;
    int rc = ifd_model_source_open(&src, path, msg, sizeof msg);
    if (rc) { /* not servable: described all the same when well-formed */
        struct stat sb;
        if (ifd__is_gguf(path))
            return ifd__inspect_gguf(out, err, path, json, msg);
        if (stat(path, &sb) == 0)
            return ifd__inspect_hf(out, err, path, json, msg, rc);
        fprintf(err, "error: %s\n", msg);
        return rc;
    }
    ifd_tokenizer_t *tok = NULL;
    const char *not = NULL;
    if (ifd_tokenizer_create_source(&tok, src, msg, sizeof msg)) {
        snprintf(why, sizeof why, "tokenizer: %s", msg);
        tok = NULL;
        not = why;
    }
    rc = ifd__emit(out, ifd__build(src, tok, not), json);
    ifd_tokenizer_destroy(tok);
    ifd_model_source_close(src);
    return rc;
}
