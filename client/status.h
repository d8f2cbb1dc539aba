/*
 * status.h — the operations commands:
 *
 *   infer models [--json]            the models the daemon serves (GET /v1/models)
 *   infer status [--watch [SECS]] [--json]
 *                                    one screen from GET /health and GET /metrics:
 *                                    workers and their state, KV blocks free/used/
 *                                    cached, prefix-cache hit rate, running and
 *                                    queued requests, tokens/s
 *
 * Both take argv as main() does and return a process exit status (cli.h).
 * Main thread only (getopt, the SIGINT flag in --watch).
 */
#ifndef IFD_CLIENT_STATUS_H
#define IFD_CLIENT_STATUS_H

int ifd_cli_status_models_main(int argc, char **argv);
int ifd_cli_status_main(int argc, char **argv);

#endif
