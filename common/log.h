/*
 * log.h — leveled logging to stderr, one line per message, with a UTC
 * timestamp, the level and the process tag. journald keeps stderr lines, so
 * this is also the daemon's log.
 *
 * The level and tag are process-wide settings (the one piece of global state
 * besides signal flags: a log sink is per process by nature). Set the tag
 * once at start-up; the level may change at any time (atomic; a SIGHUP
 * reload does). ifd_log itself is thread-safe (one fprintf per line).
 * The level can also come from $INFERD_LOG (error|warn|info|debug).
 */
#ifndef IFD_LOG_H
#define IFD_LOG_H

#include <stdarg.h>
#include <stddef.h>

typedef enum {
    IFD_LOG_ERROR = 0,
    IFD_LOG_WARN = 1,
    IFD_LOG_INFO = 2,
    IFD_LOG_DEBUG = 3,
} ifd_log_level_t;

/* Set the minimum level printed (default INFO, or $INFERD_LOG when set). */
void ifd_log_set_level(ifd_log_level_t level);
ifd_log_level_t ifd_log_get_level(void);

/* Parse "error", "warn", "info", "debug". Returns 0 or IFD_EINVAL. */
int ifd_log_parse_level(const char *s, ifd_log_level_t *out);

/* The name ifd_log_parse_level takes for a level ("?" when out of range). */
const char *ifd_log_level_name(ifd_log_level_t level);

/* Short tag printed on every line ("inferd", "worker0"); copied. */
void ifd_log_set_tag(const char *tag);

void ifd_log(ifd_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ifd_vlog(ifd_log_level_t level, const char *fmt, va_list ap);

/* The loaders' error convention: the message goes into errbuf when the
 * caller gave one (errbuf != NULL and errlen > 0; truncated to fit), else to
 * the log at ERROR. Returns rc, so a failing path can end with
 * `return ifd_fail_msg(errbuf, errlen, IFD_EFORMAT, "...", ...)`. */
int ifd_fail_msg(char *errbuf, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define IFD_ERROR(...) ifd_log(IFD_LOG_ERROR, __VA_ARGS__)
#define IFD_WARN(...)  ifd_log(IFD_LOG_WARN, __VA_ARGS__)
#define IFD_INFO(...)  ifd_log(IFD_LOG_INFO, __VA_ARGS__)
#define IFD_DEBUG(...)                                                                      \
    do {                                                                                    \
        if (ifd_log_get_level() >= IFD_LOG_DEBUG)                                           \
            ifd_log(IFD_LOG_DEBUG, __VA_ARGS__);                                            \
    } while (0)

#endif
