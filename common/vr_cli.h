/* vr_cli.h: what every binary's command line has in common.
 *
 * Exit codes (docs/operations.md, "Exit codes"): VR_EXIT_OK, VR_EXIT_FAIL (the work failed: a model
 * that does not load, a segment or port that cannot be had, errors in the input), VR_EXIT_USAGE
 * (the command line or config file is wrong: nothing was loaded or started).
 *
 * One --version format for every binary:
 *   verl-reward-server 0.1.0 (commit abc123, RelWithDebInfo, CUDA 13.0 / cuBLAS 13.1)
 *   verl-reward-bench 0.1.0 (commit abc123-dirty, Debug, cpu only)
 * then "built with GCC 12.2.0". One form for usage errors, always on stderr and naming the flag:
 *   verl-reward-score: unknown option --frobnicate. HINT: verl-reward-score --help
 *   verl-reward-score: --device needs a value. HINT: verl-reward-score --help
 *   verl-reward-score: --max-seqs 'x': not a number in [1, 67108864]. HINT: ...
 * All functions are thread-safe (they only write to the given stream). */
#ifndef VR_CLI_H
#define VR_CLI_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { VR_EXIT_OK = 0, VR_EXIT_FAIL = 1, VR_EXIT_USAGE = 2 };

/* Prints the --version lines. runtime: the accelerator runtime text of the binary
 * ("CUDA 13.0 / cuBLAS 13.1", from vr_model_runtime_versions), or NULL / "" for "cpu only". */
void vr_cli_version(FILE *f, const char *prog, const char *runtime);

/* The version line without the newline, for logs ("verl-reward-server 0.1.0 (commit ...)"). */
void vr_cli_version_text(char *buf, size_t n, const char *prog, const char *runtime);

/* Reports what getopt_long (optstring starting with ':', opterr = 0) returned for a bad argument:
 * c == ':' is a missing value, anything else an unknown option (argv[optind - 1], or the short
 * option optopt). Always returns VR_EXIT_USAGE. */
int vr_cli_getopt_error(const char *prog, int c, char **argv, int optind, int optopt);

/* "prog: " + the message + ". HINT: prog --help" on stderr; returns VR_EXIT_USAGE. */
int vr_cli_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The whole text as an unsigned number in the given base (no sign, no spaces, nothing after it).
 * 0, or -1 (out untouched). */
int vr_cli_strtou64(const char *text, int base, uint64_t *out);

/* Parses a whole decimal number in [min, max] (no sign, no spaces, no suffix). On failure
 * reports "--flag 'text': not a number in [min, max]" with vr_cli_usage_error and returns
 * VR_EXIT_USAGE; 0 on success. */
int vr_cli_parse_u64(const char *prog, const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out);
/* The same for a finite number in [min, max] ("0.5", "1e3"). */
int vr_cli_parse_double(const char *prog, const char *flag, const char *text, double min, double max,
                        double *out);

#ifdef __cplusplus
}
#endif
#endif /* VR_CLI_H */
