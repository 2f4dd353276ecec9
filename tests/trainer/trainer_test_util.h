/* trainer_test_util.h: fixtures and message checks shared by the trainer tests. */
#ifndef TRAINER_TEST_UTIL_H
#define TRAINER_TEST_UTIL_H

#include <stddef.h>

/* $VR_FIXTURES/<rel> (the source tree's tests/fixtures when unset) into path. */
void tt_fixture(char *path, size_t cap, const char *rel);
/* A whole file, malloc'd and NUL-terminated; fails the test when it cannot be read. */
char *tt_read(const char *path, size_t *len);
/* Number of lines of err that hold ": error: ". */
int tt_count(const char *err, const char *what);
/* Fails the test unless err has a line that starts with "<name>:<line>:" (line > 0) or
 * "<name>: error:" (line 0) and holds frag; and unless every error line of err starts with
 * "<name>:" and holds " HINT: " after its "error: ". */
void tt_expect_line(const char *err, const char *name, int line, const char *frag);
void tt_check_format(const char *err, const char *name);

#endif /* TRAINER_TEST_UTIL_H */
