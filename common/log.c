/*
 * log.c — see log.h. Each line is formatted into a local buffer and written
 * with a single fputs so lines from several threads never interleave.
 */
#include "log.h"
#include "error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static _Atomic int ifd__log_level = -1; /* -1: not yet read from the environment */
static char ifd__log_tag[32] = "inferd";

static const char *const ifd__level_names[] = {"error", "warn", "info", "debug"};

int ifd_log_parse_level(const char *s, ifd_log_level_t *out)
{
    for (int i = 0; i < 4; i++) {
        if (s && strcasecmp(s, ifd__level_names[i]) == 0) {
            *out = (ifd_log_level_t)i;
            return 0;
        }
    }
    return IFD_EINVAL;
}

const char *ifd_log_level_name(ifd_log_level_t level)
{
    return (int)level >= 0 && (int)level < 4 ? ifd__level_names[level] : "?";
}

void ifd_log_set_level(ifd_log_level_t level)
{
    atomic_store(&ifd__log_level, (int)level);
}

ifd_log_level_t ifd_log_get_level(void)
{
    int l = atomic_load(&ifd__log_level);
    if (l < 0) {
        ifd_log_level_t parsed = IFD_LOG_INFO;
        ifd_log_parse_level(getenv("INFERD_LOG"), &parsed);
        l = (int)parsed;
        atomic_store(&ifd__log_level, l);
    }
    return (ifd_log_level_t)l;
}

void ifd_log_set_tag(const char *tag)
{
    snprintf(ifd__log_tag, sizeof ifd__log_tag, "%s", tag);
}

void ifd_vlog(ifd_log_level_t level, const char *fmt, va_list ap)
{
    if ((int)level > (int)ifd_log_get_level())
        return;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, ifd__log_tag, (int)getpid(),
                     ifd__level_names[level]);
    if (n < 0)
        return;
    if ((size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    size_t len = strlen(line);
    if (len == sizeof line - 1)
        line[len - 1] = '\n';
    else if (len == 0 || line[len - 1] != '\n') {
        line[len] = '\n';
        line[len + 1] = '\0';
    }
    fputs(line, stderr);
}

void ifd_log(ifd_log_level_t level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ifd_vlog(level, fmt, ap);
    va_end(ap);
}

int ifd_fail_msg(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (errbuf && errlen)
        vsnprintf(errbuf, errlen, fmt, ap);
    else
        ifd_vlog(IFD_LOG_ERROR, fmt, ap);
    va_end(ap);
    return rc;
}
