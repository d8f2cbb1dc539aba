/*
 * tokcmd.h — the `infer tokenize` and `infer detokenize` commands, kept in
 * common/ next to the tokenizer so every binary (and its tests) can run them.
 *
 *   infer tokenize   (--vocab FILE.gguf | --model PATH) [--test FILE.inp]
 *                    [--no-special] [--parse-special] [--chat [--chat-template NAME]]
 *   infer detokenize (--vocab FILE.gguf | --model PATH) [--render-special]
 *
 * tokenize reads UTF-8 text on stdin (all of it, bytes as given) and prints
 * the ids separated by spaces; --test prints one line per case of a llama.cpp
 * vocab test file in the .out format. detokenize reads ids separated by
 * whitespace on stdin and writes the decoded bytes.
 *
 * Both take argv as main() does (argv[0] = the command name), print errors to
 * stderr and return a process exit status: 0 ok, 1 failure, 2 usage. They use
 * getopt (not thread-safe): call them from a main thread only.
 */
#ifndef IFD_CLIENT_TOKCMD_H
#define IFD_CLIENT_TOKCMD_H

int ifd_cli_tokcmd_tokenize(int argc, char **argv);
int ifd_cli_tokcmd_detokenize(int argc, char **argv);

#endif
