/* The GEMM-choice cache file (model/vr_gemm_tune.h) without a GPU: serialise and parse back, every
 * kind of bad file refused with the file and the entry named, merge rules, where the file lives,
 * the files it makes (0700 directory, 0600 file, refusals of other owners / writable-by-others /
 * symlinks), a corrupt file replaced by a store, and writers racing (forked processes) each keeping
 * the others' entries in a file that always parses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_gemm_tune.h"

static vr_gemm_tune_entry_t mk(int m, uint64_t algo0) {
  vr_gemm_tune_entry_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.device, sizeof e.device, "NVIDIA H200 \"x\"\\");
  e.cc_major = 9, e.cc_minor = 0, e.sms = 132, e.cublaslt = 120803;
  const int32_t key[VR_GEMM_TUNE_KEY] = {m, 3072, 2048, 0, 1, 0, 2, 0, 1, 0, 40, 1, 8192};
  memcpy(e.key, key, sizeof key);
  for (int i = 0; i < VR_GEMM_TUNE_ALGO; i++) e.algo[i] = algo0 + (uint64_t)i * 0x0101010101010101ull;
  e.algo[7] = UINT64_MAX;
  e.us = 12.5;
  return e;
}

static void add(vr_gemm_tune_set_t *s, vr_gemm_tune_entry_t e, int fresh) {
  e.fresh = fresh;
  assert_int_equal(vr_gemm_tune_append(s, &e), 0);
}

static char tmpdir[256];

static void make_tmpdir(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/test_gemm_tune.XXXXXX");
  assert_non_null(mkdtemp(tmpdir));
}

static void rm_tree(void) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text, mode_t mode) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

static void test_roundtrip(void **st) {
  (void)st;
  vr_gemm_tune_set_t s = {0}, t;
  add(&s, mk(64, 0x15), 1);
  add(&s, mk(128, 0xabcdef0123456789ull), 1);
  vr_gemm_tune_entry_t e = mk(1, 0);
  e.us = 0;
  add(&s, e, 2);
  size_t len = 0;
  char *text = vr_gemm_tune_serialise(&s, &len);
  assert_non_null(text);
  assert_int_equal(strlen(text), len);
  char err[2048] = "";
  assert_int_equal(vr_gemm_tune_parse(text, len, "x.json", &t, err, sizeof err), 0);
  assert_int_equal(t.n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_true(vr_gemm_tune_same_key(&s.e[i], &t.e[i]));
    assert_memory_equal(s.e[i].algo, t.e[i].algo, sizeof s.e[i].algo);
    assert_true(s.e[i].us == t.e[i].us);
    assert_int_equal(t.e[i].fresh, 0);
  }
  assert_string_equal(t.e[0].device, "NVIDIA H200 \"x\"\\");
  free(text);
  vr_gemm_tune_set_free(&t);
  /* empty set */
  vr_gemm_tune_set_free(&s);
  text = vr_gemm_tune_serialise(&s, &len);
  assert_int_equal(vr_gemm_tune_parse(text, len, "x.json", &t, err, sizeof err), 0);
  assert_int_equal(t.n, 0);
  free(text);
}

/* The serialised text of one entry mk(64, 1) with the member named by from replaced by to. */
static char *one_entry_with(const char *from, const char *to) {
  vr_gemm_tune_set_t s = {0};
  add(&s, mk(64, 1), 1);
  size_t len;
  char *text = vr_gemm_tune_serialise(&s, &len);
  vr_gemm_tune_set_free(&s);
  if (!from) return text;
  char *at = strstr(text, from);
  assert_non_null(at);
  char *out = malloc(len + strlen(to) + 1);
  snprintf(out, len + strlen(to) + 1, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  free(text);
  return out;
}

static void test_rejects(void **st) {
  (void)st;
  static const struct {
    const char *from, *to, *want;
  } cases[] = {
      {"\"m\":64", "\"m\":0", "entry 0: \"m\" must be an integer"},
      {"\"m\":64", "\"m\":64.5", "entry 0: \"m\""},
      {"\"m\":64,", "", "entry 0: \"m\""},
      {"\"m\":64", "\"m\":\"64\"", "entry 0: \"m\""},
      {"\"op_a\":0", "\"op_a\":2", "entry 0: \"op_a\""},
      {"\"gelu\":2", "\"gelu\":3", "entry 0: \"gelu\""},
      {"\"candidates\":40", "\"candidates\":65", "entry 0: \"candidates\""},
      {"\"sms\":132", "\"sms\":0", "entry 0: \"sms\""},
      {"\"cublaslt\":120803", "\"cublaslt\":-1", "entry 0: \"cublaslt\""},
      {"\"device\":\"NVIDIA H200 \\\"x\\\"\\\\\"", "\"device\":\"\"", "entry 0: \"device\""},
      {"\"device\":\"NVIDIA H200 \\\"x\\\"\\\\\"", "\"device\":7", "entry 0: \"device\""},
      {"\"0000000000000001\"", "\"000000000000000G\"", "entry 0: \"algo\""},
      {"\"0000000000000001\"", "\"000000000000000A\"", "entry 0: \"algo\""},
      {"\"0000000000000001\"", "\"00000000000001\"", "entry 0: \"algo\""},
      {"\"0000000000000001\",", "", "entry 0: \"algo\""},
      {"\"0000000000000001\"", "1", "entry 0: \"algo\""},
      {"\"us\":12.5", "\"us\":-1", "entry 0: \"us\""},
      {"\"us\":12.5", "\"us\":null", "entry 0: \"us\""},
      {"\"us\":12.5", "\"us\":12.5,\"extra\":1", "entry 0: \"extra\" is not a member"},
      {"\"us\":12.5", "\"us\":12.5,\"m\":64", "\"m\" appears more than once"},
      {"\"version\": 1", "\"version\": 0", "\"version\" must be an integer >= 1"},
      {"\"version\": 1", "\"version\": 1.5", "\"version\" must be an integer >= 1"},
      {"\"version\": 1", "\"version\": 1, \"more\": 0", "not a GEMM-choice cache"},
      {"verl-reward gemm-tune", "something else", "not a GEMM-choice cache"},
      {"[\n{", "[7,\n{", "entry 0 is not an object"},
      {"]}\n", "]} x\n", "text after the JSON value"},
      {"]}\n", "]\n", "malformed JSON"},
      {"\"k\":2048", "\"k\":02048", "a number JSON does not allow"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *text = one_entry_with(cases[i].from, cases[i].to);
    vr_gemm_tune_set_t s;
    char err[2048] = "";
    const int rc = vr_gemm_tune_parse(text, strlen(text), "/some/gemm-tune.json", &s, err, sizeof err);
    if (rc != VR_ERR_PARSE || !strstr(err, cases[i].want) || strncmp(err, "/some/gemm-tune.json", 20))
      fail_msg("case %zu (%s -> %s): rc %d, err \"%s\", want \"%s\"", i, cases[i].from, cases[i].to, rc, err,
               cases[i].want);
    assert_null(s.e);
    assert_int_equal(s.n, 0);
    free(text);
  }
  /* the same key twice; entry 2 named */
  vr_gemm_tune_set_t s = {0}, t;
  add(&s, mk(64, 1), 1);
  add(&s, mk(65, 1), 1);
  add(&s, mk(64, 2), 1);
  size_t len;
  char *text = vr_gemm_tune_serialise(&s, &len);
  char err[2048] = "";
  assert_int_equal(vr_gemm_tune_parse(text, len, "f", &t, err, sizeof err), VR_ERR_PARSE);
  assert_non_null(strstr(err, "f: entry 2 has the key of entry 0"));
  free(text);
  vr_gemm_tune_set_free(&s);
  /* bigger than the bound: refused before parsing */
  char *big = malloc(VR_GEMM_TUNE_MAX_BYTES + 2);
  memset(big, ' ', VR_GEMM_TUNE_MAX_BYTES + 1);
  assert_int_equal(vr_gemm_tune_parse(big, VR_GEMM_TUNE_MAX_BYTES + 1, "f", &t, err, sizeof err), VR_ERR_PARSE);
  assert_non_null(strstr(err, "more than"));
  free(big);
  assert_int_equal(vr_gemm_tune_parse("", 0, "f", &t, err, sizeof err), VR_ERR_PARSE);
}

static void test_merge(void **st) {
  (void)st;
  vr_gemm_tune_set_t file = {0}, mine = {0};
  add(&file, mk(64, 100), 0);
  add(&mine, mk(64, 200), 1);  /* same key: the file's stays */
  add(&mine, mk(128, 300), 1); /* new: added */
  add(&mine, mk(256, 400), 0); /* loaded, not fresh: not written */
  size_t added = 9;
  assert_int_equal(vr_gemm_tune_merge(&file, &mine, &added), 0);
  assert_int_equal(added, 1);
  assert_int_equal(file.n, 2);
  assert_int_equal(file.e[0].algo[0], 100);
  assert_int_equal(file.e[1].key[VR_GT_M], 128);
  /* fresh 2 replaces (it was tuned in place of an entry not valid here) */
  vr_gemm_tune_set_free(&mine);
  add(&mine, mk(64, 500), 2);
  assert_int_equal(vr_gemm_tune_merge(&file, &mine, &added), 0);
  assert_int_equal(added, 1);
  assert_int_equal(file.n, 2);
  assert_int_equal(file.e[0].algo[0], 500);
  /* another device or cuBLASLt version is another key */
  vr_gemm_tune_entry_t e = mk(64, 600);
  e.cublaslt++;
  assert_int_equal(vr_gemm_tune_find(&file, &e), -1);
  e = mk(64, 600);
  e.device[0] = 'X';
  assert_int_equal(vr_gemm_tune_find(&file, &e), -1);
  e = mk(64, 600);
  assert_int_equal(vr_gemm_tune_find(&file, &e), 0);
  vr_gemm_tune_set_free(&file);
  vr_gemm_tune_set_free(&mine);
}

static void test_resolve(void **st) {
  (void)st;
  char p[128];
  assert_int_equal(vr_gemm_tune_resolve("/a/b.json", "/env.json", "/xdg", "/home/u", p, sizeof p), 0);
  assert_string_equal(p, "/a/b.json");
  assert_int_equal(vr_gemm_tune_resolve(NULL, "/env.json", "/xdg", "/home/u", p, sizeof p), 0);
  assert_string_equal(p, "/env.json");
  assert_int_equal(vr_gemm_tune_resolve("", "", "/xdg", "/home/u", p, sizeof p), 0);
  assert_string_equal(p, "/xdg/verl-reward/gemm-tune.json");
  assert_int_equal(vr_gemm_tune_resolve(NULL, NULL, "rel", "/home/u", p, sizeof p), 0);
  assert_string_equal(p, "/home/u/.cache/verl-reward/gemm-tune.json");
  assert_int_equal(vr_gemm_tune_resolve("off", "/env.json", "/xdg", "/home/u", p, sizeof p), 1);
  assert_int_equal(vr_gemm_tune_resolve(NULL, "off", "/xdg", "/home/u", p, sizeof p), 1);
  assert_int_equal(vr_gemm_tune_resolve(NULL, NULL, NULL, NULL, p, sizeof p), -1);
  char tiny[8];
  assert_int_equal(vr_gemm_tune_resolve("/a/very/long/path", NULL, NULL, NULL, tiny, sizeof tiny), -1);
}

static void test_files(void **st) {
  (void)st;
  make_tmpdir();
  char path[512], err[2048];
  snprintf(path, sizeof path, "%s/a/b/gemm-tune.json", tmpdir);
  vr_gemm_tune_set_t mine = {0}, got;
  int exists = 1;
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0); /* not there: none */
  assert_int_equal(exists, 0);
  add(&mine, mk(64, 1), 1);
  add(&mine, mk(128, 2), 1);
  size_t added, total;
  int replaced = 1;
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(added, 2);
  assert_int_equal(total, 2);
  assert_int_equal(replaced, 0);
  struct stat sb;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/a", tmpdir);
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  snprintf(dir, sizeof dir, "%s/a/b", tmpdir);
  assert_int_equal(stat(dir, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);
  assert_int_equal(stat(path, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(exists, 1);
  assert_int_equal(got.n, 2);
  vr_gemm_tune_set_free(&got);
  /* another process's store: merged (the existing key keeps the file's algorithm) */
  vr_gemm_tune_set_t other = {0};
  add(&other, mk(64, 9), 1);
  add(&other, mk(512, 3), 1);
  assert_int_equal(vr_gemm_tune_store(path, &other, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(added, 1);
  assert_int_equal(total, 3);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(got.n, 3);
  assert_int_equal(got.e[0].algo[0], 1);
  vr_gemm_tune_set_free(&got);
  /* a corrupt file: load names it; a store replaces it with a valid one */
  write_text(path, "{\"format\": \"verl-reward gemm-tune\", \"version\": 1, \"entries\": [{\"m\": 1}", 0600);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), VR_ERR_PARSE);
  assert_non_null(strstr(err, path));
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(replaced, 1);
  assert_non_null(strstr(err, path));
  assert_int_equal(total, 2);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(got.n, 2);
  vr_gemm_tune_set_free(&got);
  /* writable by others: refused (load and store), the file left as it is */
  assert_int_equal(chmod(path, 0622), 0);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), VR_ERR_PERM);
  assert_non_null(strstr(err, "writable by group or others"));
  assert_int_equal(vr_gemm_tune_store(path, &other, &added, &total, &replaced, err, sizeof err), VR_ERR_PERM);
  assert_int_equal(chmod(path, 0600), 0);
  /* a symlink at the path: refused */
  char link[600];
  snprintf(link, sizeof link, "%s/a/b/link.json", tmpdir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_equal(vr_gemm_tune_load(link, &got, &exists, err, sizeof err), VR_ERR_PERM);
  /* a directory others can write: refused */
  char wpath[600];
  snprintf(dir, sizeof dir, "%s/open", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  assert_int_equal(chmod(dir, 0777), 0);
  snprintf(wpath, sizeof wpath, "%s/gemm-tune.json", dir);
  assert_int_equal(vr_gemm_tune_prepare(wpath, err, sizeof err), VR_ERR_PERM);
  assert_non_null(strstr(err, "writable by group or others"));
  assert_int_equal(vr_gemm_tune_store(wpath, &mine, &added, &total, &replaced, err, sizeof err), VR_ERR_PERM);
  assert_int_equal(stat(wpath, &sb), -1);
  /* a directory in the way of the file's */
  snprintf(wpath, sizeof wpath, "%s/a/b/gemm-tune.json/x.json", tmpdir);
  assert_int_not_equal(vr_gemm_tune_prepare(wpath, err, sizeof err), 0);
  vr_gemm_tune_set_free(&mine);
  vr_gemm_tune_set_free(&other);
  rm_tree();
}

/* A FIFO (or a device) at the path: refused by the fstat check at once. The old open() without
 * O_NONBLOCK waited for a writer forever (the alarm turns that hang into a failure). */
/* A file of a newer format version is refused (VR_ERR_UNSUPPORTED, "newer") and never overwritten;
 * a full file takes what fits and the store says how many new choices it could not write. */
static void test_newer_and_full(void **st) {
  (void)st;
  make_tmpdir();
  char path[512], err[2048];
  snprintf(path, sizeof path, "%s/gemm-tune.json", tmpdir);
  char *text = one_entry_with("\"version\": 1", "\"version\": 2");
  vr_gemm_tune_set_t got, mine = {0};
  assert_int_equal(vr_gemm_tune_parse(text, strlen(text), path, &got, err, sizeof err), VR_ERR_UNSUPPORTED);
  assert_non_null(strstr(err, "version 2, written by a newer verl-reward"));
  assert_null(got.e);
  write_text(path, text, 0600);
  int exists = 0;
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), VR_ERR_UNSUPPORTED);
  add(&mine, mk(64, 9), 1);
  size_t added = 7, total = 7;
  int replaced = 7;
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), VR_ERR_UNSUPPORTED);
  assert_int_equal(replaced, 0);
  size_t flen = 0;
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char back[4096];
  flen = fread(back, 1, sizeof back - 1, f);
  fclose(f);
  back[flen] = '\0';
  assert_string_equal(back, text); /* left as it was */
  free(text);
  vr_gemm_tune_set_free(&mine);
  /* full: VR_GEMM_TUNE_MAX_ENTRIES in the file, then two new keys and one the file has */
  vr_gemm_tune_set_t full = {0};
  for (int i = 0; i < VR_GEMM_TUNE_MAX_ENTRIES; i++) add(&full, mk(1000 + i, 1), 1);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(vr_gemm_tune_store(path, &full, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(total, VR_GEMM_TUNE_MAX_ENTRIES);
  assert_int_equal(err[0], '\0');
  add(&mine, mk(1, 3), 1);
  add(&mine, mk(2, 3), 1);
  add(&mine, mk(1000, 3), 1); /* already there: kept, not lost */
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(added, 0);
  assert_int_equal(total, VR_GEMM_TUNE_MAX_ENTRIES);
  assert_non_null(strstr(err, "full (4096 entries): 2 of this process's 3 new choices not written"));
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(got.n, VR_GEMM_TUNE_MAX_ENTRIES);
  vr_gemm_tune_set_free(&got);
  vr_gemm_tune_set_free(&mine);
  vr_gemm_tune_set_free(&full);
  rm_tree();
}

static void test_fifo(void **st) {
  (void)st;
  make_tmpdir();
  char path[512], err[2048] = "";
  snprintf(path, sizeof path, "%s/gemm-tune.json", tmpdir);
  assert_int_equal(mkfifo(path, 0600), 0);
  vr_gemm_tune_set_t got, mine = {0};
  int exists = 0;
  alarm(30);
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), VR_ERR_PERM);
  assert_non_null(strstr(err, "not a regular file"));
  assert_non_null(strstr(err, path));
  add(&mine, mk(64, 1), 1);
  size_t added, total;
  int replaced = 0;
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), VR_ERR_PERM);
  alarm(0);
  vr_gemm_tune_set_free(&mine);
  rm_tree();
}

/* Another process holding PATH.lock (stopped or hung) makes a store give up with VR_ERR_BUSY after
 * VR_GEMM_TUNE_LOCK_WAIT_MS, the file as it was; the old blocking flock waited forever (the alarm
 * turns that hang into a failure). */
static void test_lock_held(void **st) {
  (void)st;
  make_tmpdir();
  char path[512], lock[600], err[2048] = "";
  snprintf(path, sizeof path, "%s/gemm-tune.json", tmpdir);
  snprintf(lock, sizeof lock, "%s.lock", path);
  vr_gemm_tune_set_t mine = {0}, got;
  add(&mine, mk(64, 1), 1);
  size_t added, total;
  int replaced = 0, exists = 0;
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), 0);
  const int lfd = open(lock, O_RDWR); /* its own open file description: flock conflicts as another process's */
  assert_true(lfd >= 0);
  assert_int_equal(flock(lfd, LOCK_EX), 0);
  vr_gemm_tune_set_t other = {0};
  add(&other, mk(128, 2), 1);
  alarm(60);
  assert_int_equal(vr_gemm_tune_store(path, &other, &added, &total, &replaced, err, sizeof err), VR_ERR_BUSY);
  alarm(0);
  assert_non_null(strstr(err, lock));
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(got.n, 1); /* as it was */
  vr_gemm_tune_set_free(&got);
  assert_int_equal(flock(lfd, LOCK_UN), 0); /* released: the next store writes */
  assert_int_equal(vr_gemm_tune_store(path, &other, &added, &total, &replaced, err, sizeof err), 0);
  assert_int_equal(total, 2);
  close(lfd);
  vr_gemm_tune_set_free(&mine);
  vr_gemm_tune_set_free(&other);
  rm_tree();
}

/* A path past 4095 bytes: refused whole (VR_ERR_INVAL), no directory made; the old code cut the
 * directory's name, made the cut prefix's directories and then failed on the file. */
static void test_long_path(void **st) {
  (void)st;
  make_tmpdir();
  char path[4300], first[600], err[2048] = "";
  int n = snprintf(path, sizeof path, "%s", tmpdir);
  while (n < 4150) n += snprintf(path + n, sizeof path - (size_t)n, "/%0200d", 0);
  snprintf(path + n, sizeof path - (size_t)n, "/gemm-tune.json");
  vr_gemm_tune_set_t mine = {0};
  add(&mine, mk(64, 1), 1);
  size_t added, total;
  int replaced = 0;
  assert_int_equal(vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err), VR_ERR_INVAL);
  assert_int_equal(vr_gemm_tune_prepare(path, err, sizeof err), VR_ERR_INVAL);
  snprintf(first, sizeof first, "%s/%0200d", tmpdir, 0);
  struct stat sb;
  assert_int_equal(stat(first, &sb), -1); /* nothing made */
  vr_gemm_tune_set_free(&mine);
  rm_tree();
}

/* 6 processes store at once, each 20 entries of its own and one shared key: the file parses after
 * every store and ends with all 121 keys. */
static void test_race(void **st) {
  (void)st;
  make_tmpdir();
  char path[512];
  snprintf(path, sizeof path, "%s/gemm-tune.json", tmpdir);
  enum { P = 6, E = 20 };
  pid_t kids[P];
  for (int p = 0; p < P; p++) {
    kids[p] = fork();
    assert_true(kids[p] >= 0);
    if (kids[p] == 0) {
      int bad = 0;
      for (int r = 0; r < E && !bad; r++) {
        vr_gemm_tune_set_t mine = {0};
        vr_gemm_tune_entry_t e = mk(1000 + p * E + r, (uint64_t)p);
        e.fresh = 1;
        bad |= vr_gemm_tune_append(&mine, &e) != 0;
        e = mk(1, (uint64_t)p); /* the shared key */
        e.fresh = 1;
        bad |= vr_gemm_tune_append(&mine, &e) != 0;
        size_t added, total;
        int replaced = 0;
        char err[2048];
        bad |= vr_gemm_tune_store(path, &mine, &added, &total, &replaced, err, sizeof err) != 0 || replaced;
        vr_gemm_tune_set_t got;
        int exists;
        bad |= vr_gemm_tune_load(path, &got, &exists, err, sizeof err) != 0 || !exists;
        bad |= vr_gemm_tune_find(&got, &mine.e[0]) < 0;
        vr_gemm_tune_set_free(&got);
        vr_gemm_tune_set_free(&mine);
      }
      _exit(bad);
    }
  }
  for (int p = 0; p < P; p++) {
    int status = 0;
    assert_int_equal(waitpid(kids[p], &status, 0), kids[p]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  vr_gemm_tune_set_t got;
  int exists;
  char err[2048];
  assert_int_equal(vr_gemm_tune_load(path, &got, &exists, err, sizeof err), 0);
  assert_int_equal(got.n, P * E + 1);
  vr_gemm_tune_entry_t shared = mk(1, 0);
  const long i = vr_gemm_tune_find(&got, &shared);
  assert_true(i >= 0);
  assert_true(got.e[i].algo[0] < P); /* one of the writers' */
  vr_gemm_tune_set_free(&got);
  rm_tree();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_rejects), cmocka_unit_test(test_merge),
      cmocka_unit_test(test_resolve),   cmocka_unit_test(test_files),   cmocka_unit_test(test_race), cmocka_unit_test(test_fifo), cmocka_unit_test(test_lock_held), cmocka_unit_test(test_long_path),
      cmocka_unit_test(test_newer_and_full),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
