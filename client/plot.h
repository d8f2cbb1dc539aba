/*
 * plot.h — a small hand-written SVG line chart for the benchmark sweeps:
 * one shared x axis (e.g. concurrency, optionally on a log2 scale with a
 * tick at every x value) and one or more panels side by side, each with its
 * own y axis (linear from 0, or log10) and several series drawn as lines
 * with point markers and a legend.
 *
 * Non-finite or (on a log axis) non-positive points are skipped. Text is
 * XML-escaped. Writes to a FILE; no allocation. Thread-safe.
 */
#ifndef IFD_CLIENT_PLOT_H
#define IFD_CLIENT_PLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *name; /* legend text */
    const double *y;  /* n values, aligned with the x values */
} ifd_cli_plot_series_t;

typedef struct {
    const char *title;
    const char *ylabel;
    bool logy;
    const ifd_cli_plot_series_t *series;
    size_t n_series;
} ifd_cli_plot_panel_t;

/*
 * Writes a complete SVG document: `title` on top, the panels left to
 * right, `xlabel` under each. x has n values (ascending). logx puts x on a
 * log2 scale. Returns 0, or IFD_EINVAL (n == 0, no panels) / -EIO (the
 * FILE failed).
 */
int ifd_cli_plot_svg(FILE *f, const char *title, const char *xlabel, const double *x, size_t n,
                     bool logx, const ifd_cli_plot_panel_t *panels, size_t n_panels);

#endif
