/* What an LTTng-UST event costs, for `rake bench` (bench/lttng.rb): one
 * tracepoint with one 64-bit integer field, timed by this thread's CPU
 * clock over TIMED events into a session's fresh buffers, then, once
 * FILL more events have wrapped them, over TIMED events again. It refuses
 * to time an event no session has enabled (that would time LTTng-UST's
 * disabled branch).
 *
 *   tracepoint_cost TIMED FILL
 *
 * Prints one JSON line: ns an event on the first lap and once wrapped,
 * and this process's resident memory (KiB) before and after. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "static_tracing_bench_tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t thread_cpu_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
	return (int64_t) now.tv_sec * 1000000000 + now.tv_nsec;
}

/* ns an event, over COUNT events of values from FIRST on. */
static double per_event(long first, long count)
{
	int64_t start = thread_cpu_ns();
	long i;

	for (i = first; i < first + count; i++)
		lttng_ust_tracepoint(static_tracing_bench, value, (int64_t) i);
	return (double) (thread_cpu_ns() - start) / (double) count;
}

/* VmRSS of /proc/self/status, in KiB. */
static long resident_kib(void)
{
	char line[256];
	long kib = 0;
	FILE *status = fopen("/proc/self/status", "r");

	if (!status)
		return 0;
	while (fgets(line, sizeof line, status))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kib = atol(line + 6);
	fclose(status);
	return kib;
}

int main(int argc, char **argv)
{
	long timed = argc > 2 ? atol(argv[1]) : 0;
	long fill = argc > 2 ? atol(argv[2]) : 0;
	long resident_before, resident_first_lap;
	double first_lap, wrapped;

	if (timed <= 0 || fill < 0) {
		fprintf(stderr, "usage: %s TIMED FILL\n", argv[0]);
		return 2;
	}
	if (!lttng_ust_tracepoint_enabled(static_tracing_bench, value)) {
		fprintf(stderr, "%s: static_tracing_bench:value is not enabled by any session\n", argv[0]);
		return 1;
	}
	resident_before = resident_kib();
	first_lap = per_event(0, timed);
	resident_first_lap = resident_kib();
	per_event(timed, fill);
	wrapped = per_event(timed + fill, timed);
	printf("{\"events_per_sample\": %ld, \"first_lap_ns\": %.3f, \"wrapped_ns\": %.3f, "
	       "\"resident_before_kib\": %ld, \"resident_first_lap_kib\": %ld, \"resident_wrapped_kib\": %ld}\n",
	       timed, first_lap, wrapped, resident_before, resident_first_lap, resident_kib());
	return 0;
}
