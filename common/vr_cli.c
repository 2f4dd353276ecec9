/* vr_cli.c: --version, usage errors and number parsing shared by every binary (vr_cli.h). */
#include "vr_cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "vr_version.h"

void vr_cli_version_text(char *buf, size_t n, const char *prog, const char *runtime) {
  snprintf(buf, n, "%s %s (commit %s, %s, %s)", prog, VR_VERSION, VR_GIT_COMMIT, VR_BUILD_TYPE,
           runtime && runtime[0] ? runtime : "cpu only");
}

void vr_cli_version(FILE *f, const char *prog, const char *runtime) {
  char line[512];
  vr_cli_version_text(line, sizeof line, prog, runtime);
  fprintf(f, "%s\nbuilt with %s\n", line, VR_COMPILER);
}

static void vr_cli_vreport(const char *prog, const char *fmt, va_list ap) {
  char msg[768];
  vsnprintf(msg, sizeof msg, fmt, ap);
  /* a message with a HINT of its own keeps it; others point at --help */
  if (strstr(msg, "HINT:")) fprintf(stderr, "%s: %s\n", prog, msg);
  else fprintf(stderr, "%s: %s. HINT: %s --help\n", prog, msg, prog);
}

int vr_cli_usage_error(const char *prog, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vr_cli_vreport(prog, fmt, ap);
  va_end(ap);
  return VR_EXIT_USAGE;
}

int vr_cli_getopt_error(const char *prog, int c, char **argv, int optind, int optopt) {
  const char *arg = optind > 0 ? argv[optind - 1] : "?";
  char flag[128];
  if (optopt && !(arg[0] == '-' && arg[1] == '-')) snprintf(flag, sizeof flag, "-%c", optopt);
  else snprintf(flag, sizeof flag, "%.*s", (int)strcspn(arg, "="), arg); /* "--flag=value": the flag */
  if (c == ':') return vr_cli_usage_error(prog, "%s needs a value", flag);
  return vr_cli_usage_error(prog, "unknown option %s", flag);
}

int vr_cli_strtou64(const char *text, int base, uint64_t *out) {
  if (!text || !*text || !isdigit((unsigned char)*text)) return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long x = strtoull(text, &end, base);
  if (errno || end == text || *end) return -1;
  *out = x;
  return 0;
}

int vr_cli_parse_u64(const char *prog, const char *flag, const char *text, uint64_t min, uint64_t max,
                     uint64_t *out) {
  uint64_t x;
  if (vr_cli_strtou64(text, 10, &x) != 0 || x < min || x > max)
    return vr_cli_usage_error(prog, "%s '%s': not a number in [%llu, %llu]", flag, text, (unsigned long long)min,
                              (unsigned long long)max);
  *out = x;
  return 0;
}

int vr_cli_parse_double(const char *prog, const char *flag, const char *text, double min, double max,
                        double *out) {
  char *end = NULL;
  errno = 0;
  double x = text && *text && !isspace((unsigned char)*text) ? strtod(text, &end) : NAN;
  if (!end || *end || errno || !isfinite(x) || x < min || x > max)
    return vr_cli_usage_error(prog, "%s '%s': not a number in [%g, %g]", flag, text ? text : "", min, max);
  *out = x;
  return 0;
}
