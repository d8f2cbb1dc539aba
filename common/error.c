/*
 * error.c — ifd_strerror/ifd_err_name, generated from the IFD_ERRORS table.
 * -errno values are answered from the C library.
 */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

static const struct {
    int code;
    const char *name;
    const char *msg;
} ifd__errtab[] = {
#define IFD__ERR_ROW(name, value, msg) {value, "IFD_" #name, msg},
    IFD_ERRORS(IFD__ERR_ROW)
#undef IFD__ERR_ROW
};

const char *ifd_strerror(int err)
{
    if (err == 0)
        return "success";
    for (size_t i = 0; i < sizeof ifd__errtab / sizeof ifd__errtab[0]; i++)
        if (ifd__errtab[i].code == err)
            return ifd__errtab[i].msg;
    if (err < 0 && err > -4096)
        return strerror(-err); /* glibc's table is static and thread-safe to read */
    return "unknown error";
}

const char *ifd_err_name(int err)
{
    if (err == 0)
        return "OK";
    for (size_t i = 0; i < sizeof ifd__errtab / sizeof ifd__errtab[0]; i++)
        if (ifd__errtab[i].code == err)
            return ifd__errtab[i].name;
    if (err < 0 && err > -4096) {
        const char *n = strerrorname_np(-err);
        if (n)
            return n;
    }
    return "EUNKNOWN";
}

void ifd_errbuf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
