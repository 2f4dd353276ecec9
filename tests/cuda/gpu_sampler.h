/* gpu_sampler.h: the GPU's SM clock and board power sampled in a background thread while a
 * benchmark's timed loop runs, through NVML loaded at run time (dlopen of libnvidia-ml.so.1, so
 * the benchmarks start on machines without the driver and report the sampler unavailable).
 * The H200 reaches its 700 W limit within about a second of full load and then runs its SM
 * clock at 1440-1740 MHz instead of 1980 (docs/benchmarks.md, fourteenth session): a rate means
 * little without the clock it ran at. Header-only, C. */
#ifndef GPU_SAMPLER_H
#define GPU_SAMPLER_H

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct {
  /* NVML entry points (NULL: unavailable) */
  void *lib, *dev;
  int (*clock)(void *dev, int type, unsigned *mhz);
  int (*power)(void *dev, unsigned *mw);
  int (*reasons)(void *dev, unsigned long long *r);
  int (*shutdown)(void);
  /* the running window */
  pthread_t th;
  volatile int stop, running;
  double sum_mhz, sum_w;
  unsigned min_mhz, max_mhz;
  long n, n_capped; /* samples; those with the power-cap reason (software or hardware) active */
} gpu_sampler_t;

/* The summary of one window: mean / min / max SM clock, mean power, the fraction of samples
 * with a power cap active; n == 0: nothing was sampled (available 0: no NVML). */
typedef struct {
  double mean_mhz, mean_w, capped;
  unsigned min_mhz, max_mhz;
  long n;
  int available;
} gpu_sample_sum_t;

#define GPU_SAMPLER_PERIOD_MS 20
#define GPU_NVML_CLOCK_SM 1
#define GPU_NVML_REASON_SW_POWER_CAP 0x4ull
#define GPU_NVML_REASON_HW_POWER_BRAKE 0x80ull

/* Opens NVML for the current CUDA device (matched by PCI bus id); 0, or -1 with the sampler
 * unavailable (no driver library, no device, or an NVML call failing), which the stop call
 * then reports as an empty window. */
static inline int gpu_sampler_open(gpu_sampler_t *s) {
  memset(s, 0, sizeof *s);
  int (*init)(void) = NULL, (*by_pci)(const char *, void **) = NULL;
  char bus[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  s->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!s->lib) return -1;
  *(void **)&init = dlsym(s->lib, "nvmlInit_v2");
  *(void **)&by_pci = dlsym(s->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&s->clock = dlsym(s->lib, "nvmlDeviceGetClockInfo");
  *(void **)&s->power = dlsym(s->lib, "nvmlDeviceGetPowerUsage");
  *(void **)&s->reasons = dlsym(s->lib, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!s->reasons) *(void **)&s->reasons = dlsym(s->lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
  *(void **)&s->shutdown = dlsym(s->lib, "nvmlShutdown");
  if (!init || !by_pci || !s->clock || !s->power || init() != 0 || by_pci(bus, &s->dev) != 0) {
    dlclose(s->lib);
    memset(s, 0, sizeof *s);
    return -1;
  }
  return 0;
}

static inline void *gpu_sampler_loop(void *arg) {
  gpu_sampler_t *s = (gpu_sampler_t *)arg;
  const struct timespec period = {0, GPU_SAMPLER_PERIOD_MS * 1000000L};
  while (!s->stop) {
    unsigned mhz = 0, mw = 0;
    unsigned long long r = 0;
    if (s->clock(s->dev, GPU_NVML_CLOCK_SM, &mhz) == 0 && s->power(s->dev, &mw) == 0) {
      if (s->reasons && s->reasons(s->dev, &r) != 0) r = 0;
      s->sum_mhz += mhz, s->sum_w += mw / 1000.0;
      if (s->n == 0 || mhz < s->min_mhz) s->min_mhz = mhz;
      if (mhz > s->max_mhz) s->max_mhz = mhz;
      s->n_capped += (r & (GPU_NVML_REASON_SW_POWER_CAP | GPU_NVML_REASON_HW_POWER_BRAKE)) != 0;
      ++s->n;
    }
    nanosleep(&period, NULL);
  }
  return NULL;
}

/* Starts a window (a no-op when unavailable or already running). */
static inline void gpu_sampler_start(gpu_sampler_t *s) {
  if (!s->dev || s->running) return;
  s->stop = 0, s->sum_mhz = s->sum_w = 0, s->min_mhz = s->max_mhz = 0, s->n = s->n_capped = 0;
  s->running = pthread_create(&s->th, NULL, gpu_sampler_loop, s) == 0;
}

/* Ends the window and returns its summary (n 0 when nothing was sampled). */
static inline gpu_sample_sum_t gpu_sampler_stop(gpu_sampler_t *s) {
  gpu_sample_sum_t r;
  memset(&r, 0, sizeof r);
  r.available = s->dev != NULL;
  if (!s->running) return r;
  s->stop = 1;
  pthread_join(s->th, NULL);
  s->running = 0;
  if (s->n > 0) {
    r.n = s->n, r.mean_mhz = s->sum_mhz / s->n, r.mean_w = s->sum_w / s->n, r.capped = (double)s->n_capped / s->n;
    r.min_mhz = s->min_mhz, r.max_mhz = s->max_mhz;
  }
  return r;
}

static inline void gpu_sampler_close(gpu_sampler_t *s) {
  if (s->running) (void)gpu_sampler_stop(s);
  if (s->dev && s->shutdown) (void)s->shutdown();
  if (s->lib) dlclose(s->lib);
  memset(s, 0, sizeof *s);
}

/* "SM 1612 MHz mean (1440-1980), 688 W, power-capped 91% of 137 samples", or "not sampled". */
static inline void gpu_sample_format(char *buf, size_t n, const gpu_sample_sum_t *r) {
  if (r->n == 0 && r->available)
    snprintf(buf, n, "no samples (window under %d ms)", GPU_SAMPLER_PERIOD_MS);
  else if (r->n == 0)
    snprintf(buf, n, "not sampled (no NVML)");
  else
    snprintf(buf, n, "SM %.0f MHz mean (%u-%u), %.0f W, power-capped %.0f%% of %ld samples", r->mean_mhz, r->min_mhz,
             r->max_mhz, r->mean_w, 100.0 * r->capped, r->n);
}

#endif
