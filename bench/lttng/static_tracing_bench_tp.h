/* The one event of bench/lttng/tracepoint_cost.c: a 64-bit integer, as a
 * recorded fire(Integer) writes one. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER static_tracing_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./static_tracing_bench_tp.h"

#if !defined(STATIC_TRACING_BENCH_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define STATIC_TRACING_BENCH_TP_H

#include <stdint.h>
#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(
	static_tracing_bench,
	value,
	LTTNG_UST_TP_ARGS(int64_t, value),
	LTTNG_UST_TP_FIELDS(lttng_ust_field_integer(int64_t, value, value))
)

#endif

#include <lttng/tracepoint-event.h>
