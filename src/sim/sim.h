/*
 * sim.h -- evidence tools: `sluice simulate` and `sluice replay`.
 *
 * simulate generates realistic API traffic (mobile apps that burst on open,
 * a user with a web and a mobile client on one IP, a campus behind one NAT
 * address, abusers at 18,000 requests a minute) and replays it in simulated
 * time against the limiters people use: a fixed window, a sliding window
 * (log and counter), the sluice token bucket (sluice_eval(), the real
 * decision code) and the rules of any sluice config file.
 *
 * replay feeds an nginx access log through a config's rules in simulated
 * time and says what would have been limited, before anything is enforced.
 *
 * Both run on the caller's thread with no I/O beyond their files: a trace
 * is an array of events, a limiter (limiters.c; the type keeps its older
 * name, sluice_sim_policy_t) answers allow/reject for one event.
 */
#ifndef SLUICE_SIM_SIM_H
#define SLUICE_SIM_SIM_H

#include "sluice.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* `sluice simulate [--seed N] [--duration S] [--config FILE] [--json]` */
int sluice_cmd_simulate(int argc, char **argv);

/* `sluice replay --config FILE [--json] [--top N] ACCESS_LOG` */
int sluice_cmd_replay(int argc, char **argv);

/* A command-line count: decimal digits only, within [min, max]; 0 or -1. */
int sluice_sim_parse_u64(const char *s, uint64_t min, uint64_t max,
			 uint64_t *out);

/* Option --opt of `sluice cmd` as such a count; when it is not one,
 * "sluice cmd: --opt wants <want>, not '<arg>'" on stderr and -1. */
int sluice_sim_opt_u64(const char *cmd, const char *opt, const char *want,
		       const char *arg, uint64_t min, uint64_t max,
		       uint64_t *out);

/* ---------------------------------------------------------------- traces */

/* Who sends a request.  Every class but SLUICE_SIM_ABUSER is legitimate. */
typedef enum {
	SLUICE_SIM_MOBILE = 0, /* app: 12 requests on open, 3 refreshes/min */
	SLUICE_SIM_MULTI,      /* one user, web + mobile client, one IP */
	SLUICE_SIM_NAT_USER,   /* logged-in user behind the campus NAT */
	SLUICE_SIM_NAT_ANON,   /* anonymous visitor behind the campus NAT */
	SLUICE_SIM_ABUSER,     /* 18,000 requests a minute while active */
	SLUICE_SIM_NCLASSES
} sluice_sim_class_t;

const char *sluice_sim_class_name(sluice_sim_class_t c);

typedef struct sluice_sim_client_s {
	sluice_sim_class_t cls;
	char user_id[32];  /* the x-user-id header, "" when anonymous */
	char ip[48];	   /* the client address as text */
	const char *agent; /* the user-agent header */
	struct sockaddr_storage addr; /* ip, parsed */
	uint32_t key;		      /* the classic key: user id, else IP */
} sluice_sim_client_t;

typedef struct sluice_sim_event_s {
	int64_t t_us;	 /* simulated time since the start */
	uint32_t client; /* index into the trace's clients */
	uint32_t route;	 /* index into sluice_sim_routes */
} sluice_sim_event_t;

/* The method and path of a route. */
typedef struct sluice_sim_route_s {
	const char *method;
	const char *path;
} sluice_sim_route_t;

extern const sluice_sim_route_t sluice_sim_routes[];
extern const size_t sluice_sim_nroutes;

typedef struct sluice_sim_trace_s {
	sluice_sim_client_t *clients;
	size_t nclients;
	sluice_sim_event_t *events; /* sorted by time */
	size_t nevents, cap;
	char **keys; /* classic key names, indexed by client.key */
	size_t nkeys;
	int64_t duration_us;
} sluice_sim_trace_t;

/* How many of each; sluice_sim_params_default() gives the standard mix. */
typedef struct sluice_sim_params_s {
	int64_t duration_us;
	unsigned mobile_users;
	unsigned multi_users;
	unsigned nat_users;
	unsigned nat_anon;
	unsigned abusers;
} sluice_sim_params_t;

void sluice_sim_params_default(sluice_sim_params_t *p);

/* Generates the trace for a seed: the same seed gives the same trace,
 * byte for byte.  Returns 0 or SLUICE_ENOMEM. */
int sluice_sim_generate(const sluice_sim_params_t *p, uint64_t seed,
			sluice_sim_trace_t *out);

/* Building blocks for hand-made traces (tests): adds a client with the
 * given class, user id ("" for none) and IP, and returns its index. */
int64_t sluice_sim_add_client(sluice_sim_trace_t *tr, sluice_sim_class_t cls,
			      const char *user_id, const char *ip);
int sluice_sim_add_event(sluice_sim_trace_t *tr, int64_t t_us, uint32_t client,
			 uint32_t route);
/* Sorts the events by time (ties keep client, then insertion order). */
void sluice_sim_sort(sluice_sim_trace_t *tr);

void sluice_sim_trace_free(sluice_sim_trace_t *tr);

/* ----------------------------------------------------- limiters compared */

typedef struct sluice_sim_policy_s sluice_sim_policy_t;
struct sluice_sim_policy_s {
	char name[64];
	/* 1 allow, 0 reject; may keep per-key state in impl. */
	int (*take)(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		    const sluice_sim_event_t *ev);
	void (*destroy)(sluice_sim_policy_t *p);
	void *impl;
};

/* The limiters compared (limiters.c), keyed by the classic key (x-user-id, else
 * the client IP).  `limit` requests per `window_us` for the windows. */
sluice_sim_policy_t *sluice_sim_fixed_window(uint32_t limit, int64_t window_us,
					     size_t nkeys);
sluice_sim_policy_t *sluice_sim_sliding_log(uint32_t limit, int64_t window_us,
					    size_t nkeys);
sluice_sim_policy_t *
sluice_sim_sliding_counter(uint32_t limit, int64_t window_us, size_t nkeys);
sluice_sim_policy_t *sluice_sim_token_bucket(const sluice_limit_t *limit,
					     size_t nkeys);

struct sluice_config_s;
/* Every rule of a loaded config, through sluice_rules_match() (the same
 * code `sluice serve` runs), all-or-nothing across enforcing rules as in
 * `sluice serve` (see rulestate.h).  The policy borrows cfg. */
sluice_sim_policy_t *sluice_sim_config_policy(const struct sluice_config_s *cfg,
					      const char *name);

void sluice_sim_policy_free(sluice_sim_policy_t *p);

/* --------------------------------------------------------------- results */

/* The span over which the boundary spike is measured. */
#define SLUICE_SIM_SPIKE_US (2 * INT64_C(1000000))

typedef struct sluice_sim_result_s {
	char policy[64];
	uint64_t requests[SLUICE_SIM_NCLASSES];
	uint64_t rejected[SLUICE_SIM_NCLASSES];
	uint64_t legit, legit_rejected;
	uint64_t abuse, abuse_rejected;
	/* The most requests one key passed in any SLUICE_SIM_SPIKE_US span,
	 * the key, and where the span starts. */
	uint64_t spike;
	uint32_t spike_key;
	int64_t spike_start_us;
	/* Per simulated second: abusive requests passed, legitimate ones
	 * rejected (for the plots). */
	size_t nseconds;
	uint32_t *abuse_passed;
	uint32_t *legit_rejected_s;
} sluice_sim_result_t;

/* Replays the trace against each policy; results[i] for policies[i].
 * Returns 0 or SLUICE_ENOMEM. */
int sluice_sim_run(const sluice_sim_trace_t *tr, sluice_sim_policy_t **policies,
		   size_t npolicies, sluice_sim_result_t *results);

void sluice_sim_result_free(sluice_sim_result_t *r);

/* Largest number of the sorted times t[0..n) inside any half-open span
 * [x, x + span_us); *start gets the first time of the best span. */
uint64_t sluice_sim_max_in_span(const int64_t *t, size_t n, int64_t span_us,
				int64_t *start);

#endif /* SLUICE_SIM_SIM_H */
