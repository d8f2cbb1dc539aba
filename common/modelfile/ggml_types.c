/*
 * ggml_types.c — lookups over the IFD_GGML_TYPES table.
 */
#include "ggml_types.h"
#include "error.h"

#include <stddef.h>

typedef struct {
    uint32_t id;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} ifd__ggml_type_info_t;

static const ifd__ggml_type_info_t ifd__ggml_types[] = {
#define IFD__GGML_ROW(name, id, be, bb) {id, #name, be, bb},
    IFD_GGML_TYPES(IFD__GGML_ROW)
#undef IFD__GGML_ROW
};

static const ifd__ggml_type_info_t *ifd__ggml_info(uint32_t id)
{
    for (size_t i = 0; i < sizeof ifd__ggml_types / sizeof ifd__ggml_types[0]; i++)
        if (ifd__ggml_types[i].id == id)
            return &ifd__ggml_types[i];
    return NULL;
}

bool ifd_ggml_type_valid(uint32_t id)
{
    return ifd__ggml_info(id) != NULL;
}

const char *ifd_ggml_type_name(uint32_t id)
{
    const ifd__ggml_type_info_t *t = ifd__ggml_info(id);
    return t ? t->name : "?";
}

uint32_t ifd_ggml_block_elems(uint32_t id)
{
    const ifd__ggml_type_info_t *t = ifd__ggml_info(id);
    return t ? t->block_elems : 0;
}

uint32_t ifd_ggml_block_bytes(uint32_t id)
{
    const ifd__ggml_type_info_t *t = ifd__ggml_info(id);
    return t ? t->block_bytes : 0;
}

int ifd_ggml_row_bytes(uint32_t id, uint64_t ne0, uint64_t *out)
{
    const ifd__ggml_type_info_t *t = ifd__ggml_info(id);
    if (!t || ne0 % t->block_elems != 0)
        return IFD_EINVAL;
    uint64_t blocks = ne0 / t->block_elems;
    if (blocks > UINT64_MAX / t->block_bytes)
        return IFD_EOVERFLOW;
    *out = blocks * t->block_bytes;
    return 0;
}
