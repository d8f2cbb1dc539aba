/*
 * prompt.h — `infer "PROMPT"` (also `infer prompt …`, and `infer -` to read
 * the prompt from stdin): one chat completion (or, with --raw, a plain
 * completion of the text as given), its answer streamed to stdout as the
 * tokens arrive. `infer prompt --help` lists the options.
 *
 * Takes argv as main() does (argv[0] = the command name) and returns a
 * process exit status (cli.h). Uses getopt: main thread only.
 */
#ifndef IFD_CLIENT_PROMPT_H
#define IFD_CLIENT_PROMPT_H

int ifd_cli_prompt_main(int argc, char **argv);

#endif
