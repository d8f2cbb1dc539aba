/*
 * plot.c — SVG line charts (see plot.h). Coordinates are computed per
 * panel: a linear y axis starts at 0 and ends at a "nice" multiple (1, 2,
 * 2.5 or 5 × 10^k) of its tick step; a log axis spans whole decades.
 */
#include "plot.h"

#include "error.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define PANEL_W    470.0
#define PANEL_H    330.0
#define M_LEFT     72.0
#define M_RIGHT    22.0
#define M_TOP      42.0
#define M_BOT      52.0
#define TITLE_H    34.0
#define LEGEND_ROW 18.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c",
                                      "#ff7f0e", "#9467bd", "#8c564b"};

static void xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

static double nice_step(double range)
{
    if (!(range > 0))
        return 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
    double m = r <= 1 ? 1 : r <= 2 ? 2 : r <= 2.5 ? 2.5 : r <= 5 ? 5 : 10;
    return m * mag;
}

static void fmt_num(char *buf, size_t n, double v)
{
    if (v != 0 && (fabs(v) >= 1e6 || fabs(v) < 1e-3))
        snprintf(buf, n, "%.0e", v);
    else
        snprintf(buf, n, "%.6g", v);
}

typedef struct {
    bool log;
    double lo, hi; /* in axis units (log10 of the value when log) */
} axis_t;

static bool usable(double v, bool log)
{
    return isfinite(v) && (!log || v > 0);
}

static double axis_pos(const axis_t *a, double v)
{
    double u = a->log ? log10(v) : v;
    return a->hi > a->lo ? (u - a->lo) / (a->hi - a->lo) : 0.5;
}

static void panel(FILE *f, double ox, const char *xlabel, const double *x, size_t n, bool logx,
                  const ifd_cli_plot_panel_t *p)
{
    const double pw = PANEL_W - M_LEFT - M_RIGHT, ph = PANEL_H - M_TOP - M_BOT;
    const double px = ox + M_LEFT, py = TITLE_H + M_TOP;
    char buf[64];

    /* y range */
    double ymin = INFINITY, ymax = -INFINITY;
    for (size_t s = 0; s < p->n_series; s++)
        for (size_t i = 0; i < n; i++)
            if (usable(p->series[s].y[i], p->logy)) {
                ymin = fmin(ymin, p->series[s].y[i]);
                ymax = fmax(ymax, p->series[s].y[i]);
            }
    axis_t ya = {.log = p->logy};
    double step = 1;
    if (!isfinite(ymax)) {
        ya.lo = 0;
        ya.hi = 1;
    } else if (p->logy) {
        ya.lo = floor(log10(ymin));
        ya.hi = ceil(log10(ymax));
        if (ya.hi <= ya.lo)
            ya.hi = ya.lo + 1;
    } else {
        step = nice_step(ymax);
        ya.lo = 0;
        ya.hi = ceil(ymax / step) * step;
        if (ya.hi <= 0)
            ya.hi = 1;
    }
    axis_t xa = {
        .log = logx, .lo = logx ? log10(x[0]) : x[0], .hi = logx ? log10(x[n - 1]) : x[n - 1]};

    fprintf(f, "<g font-family=\"sans-serif\" font-size=\"12\">\n");
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"14\" "
            "font-weight=\"bold\">",
            px + pw / 2, TITLE_H + 22);
    xml_text(f, p->title);
    fputs("</text>\n", f);
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#444\"/>\n",
            px, py, pw, ph);

    /* y grid and labels */
    if (p->logy) {
        for (double d = ya.lo; d <= ya.hi + 1e-9; d += 1) {
            double yy = py + ph - (d - ya.lo) / (ya.hi - ya.lo) * ph;
            fmt_num(buf, sizeof(buf), pow(10, d));
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    px, yy, px + pw, yy);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", px - 6,
                    yy + 4, buf);
        }
    } else {
        for (double v = 0; v <= ya.hi + step * 1e-6; v += step) {
            double yy = py + ph - axis_pos(&ya, v) * ph;
            fmt_num(buf, sizeof(buf), v);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                    px, yy, px + pw, yy);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", px - 6,
                    yy + 4, buf);
        }
    }
    /* x ticks: one per x value */
    for (size_t i = 0; i < n; i++) {
        double xx = px + axis_pos(&xa, x[i]) * pw;
        fmt_num(buf, sizeof(buf), x[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", xx,
                py, xx, py + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", xx,
                py + ph + 16, buf);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", px + pw / 2, py + ph + 34);
    xml_text(f, xlabel);
    fputs(logx ? " (log scale)</text>\n" : "</text>\n", f);
    fprintf(f, "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" text-anchor=\"middle\">",
            ox + 16, py + ph / 2);
    xml_text(f, p->ylabel);
    fputs(p->logy ? " (log scale)</text>\n" : "</text>\n", f);

    /* series */
    for (size_t s = 0; s < p->n_series; s++) {
        const char *col = palette[s % (sizeof palette / sizeof palette[0])];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (size_t i = 0; i < n; i++) {
            double v = p->series[s].y[i];
            if (!usable(v, p->logy))
                continue;
            fprintf(f, "%.1f,%.1f ", px + axis_pos(&xa, x[i]) * pw,
                    py + ph - axis_pos(&ya, v) * ph);
        }
        fputs("\"/>\n", f);
        for (size_t i = 0; i < n; i++) {
            double v = p->series[s].y[i];
            if (!usable(v, p->logy))
                continue;
            fmt_num(buf, sizeof(buf), v);
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s</title>"
                    "</circle>\n",
                    px + axis_pos(&xa, x[i]) * pw, py + ph - axis_pos(&ya, v) * ph, col, buf);
        }
        double ly = py + ph + M_BOT + LEGEND_ROW * (double)s;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/>\n",
                px, ly - 4, px + 24, ly - 4, col);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", px + 30, ly);
        xml_text(f, p->series[s].name);
        fputs("</text>\n", f);
    }
    fputs("</g>\n", f);
}

int ifd_cli_plot_svg(FILE *f, const char *title, const char *xlabel, const double *x, size_t n,
                     bool logx, const ifd_cli_plot_panel_t *panels, size_t n_panels)
{
    if (n == 0 || n_panels == 0)
        return IFD_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!usable(x[i], logx))
            return IFD_EINVAL;
    size_t max_series = 0;
    for (size_t i = 0; i < n_panels; i++)
        if (panels[i].n_series > max_series)
            max_series = panels[i].n_series;
    double w = PANEL_W * (double)n_panels;
    double h = TITLE_H + PANEL_H + LEGEND_ROW * (double)max_series + 8;
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            w, h, w, h);
    fprintf(f,
            "<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-family=\"sans-serif\" "
            "font-size=\"16\" font-weight=\"bold\">",
            w / 2);
    xml_text(f, title);
    fputs("</text>\n", f);
    for (size_t i = 0; i < n_panels; i++)
        panel(f, PANEL_W * (double)i, xlabel, x, n, logx, &panels[i]);
    fputs("</svg>\n", f);
    if (fflush(f) != 0 || ferror(f))
        return -EIO;
    return 0;
}
