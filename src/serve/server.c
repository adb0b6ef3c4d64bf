/*
 * server.c -- threads, listeners, signals, reload and drain.
 */
#include "serve/server.h"
#include "grpc/grpc.h"
#include "policy/envoy/config.h"
#include "serve/server_config.h"
#include "serve/statsd.h"
#include "serve/store_events.h"
#include "xds/xds.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct sluice_server_s {
	const sluice_serve_opts_t *opts;
	uv_loop_t *main_loop;
	uv_signal_t sighup, sigterm, sigint;
	sluice_memstore_t *store;
	sluice_shmstore_t *shm; /* store: shared */
	sluice_live_t *live;	/* current config (main thread's reference) */
	/* The config the process started with: its listen, threads and
	 * store are what runs until a restart, whatever reloads say. */
	sluice_live_t *boot;
	sluice_worker_t *workers;
	unsigned nworkers;
	int stopping;
	/* envoy.config_dir: polled for changes (policy/envoy/watch.c) */
	uv_timer_t envoy_watch;
	uint64_t envoy_stamp;
	uv_timer_t statsd; /* envoy.statsd's flushes (serve/statsd.c) */
	/* envoy.xds: the client, and the resources of the last config it
	 * brought that was accepted (every reload builds the domains from
	 * them: none until the first arrives) */
	sluice_xds_t *xds;
	sluice_envoy_text_t *xds_texts;
	size_t nxds_texts;
} sluice_server_t;

/* The running config's envoy directory, or NULL. */
static const char *envoy_dir(const sluice_server_t *s)
{
	const sluice_envoy_config_t *e = s->live->cfg->envoy;

	return e && e->settings.watch_ms ? e->dir : NULL;
}

/* What the running config's envoy directory looked like before it was
 * read (sluice_envoy_config_t.stamp), or 0. */
static uint64_t envoy_loaded_stamp(const sluice_server_t *s)
{
	return envoy_dir(s) ? s->live->cfg->envoy->stamp : 0;
}

static int on_xds(void *arg, sluice_envoy_text_t *texts, size_t n, char *err,
		  size_t errlen);

/* A reload (SIGHUP, the directory) whose envoy.xds differs from the
 * running client's starts a client for the new block (a new server,
 * node, TLS files); *old is the one it replaces, stopped once the config
 * is applied.  The running one stays when the new cannot start (-1 with
 * why).  A control plane's own update does not replace the client it
 * came from: the next SIGHUP does. */
static int xds_follow(sluice_server_t *s, const sluice_config_t *cfg,
		      int trigger, sluice_xds_t **old, char *err, size_t errlen)
{
	const sluice_envoy_xds_t *want =
		cfg->envoy ? cfg->envoy->settings.xds : NULL;
	sluice_xds_t *nx = NULL;

	*old = NULL;
	if (sluice_envoy_xds_same(want, sluice_xds_config(s->xds)))
		return 0;
	if (trigger == SLUICE_RELOAD_XDS) {
		sluice_log_warn("envoy.xds changed in %s: the client follows "
				"it at the next SIGHUP",
				cfg->path);
		return 0;
	}
	if (want && !(nx = sluice_xds_start(s->main_loop, want, on_xds, s, err,
					    errlen)))
		return -1;
	*old = s->xds;
	s->xds = nx;
	if (want)
		sluice_log_info("envoy.xds: following %s as node \"%.100s\"",
				want->server, want->node_id);
	return 1;
}

/* After xds_follow() replaced the client: the old one stopped; the last
 * accepted resources stay served until the new control plane sends its
 * own (not ready only if there were none). */
static void xds_switched(sluice_server_t *s, sluice_xds_t *old)
{
	sluice_xds_stop(old);
	if (!s->xds) {
		sluice_envoy_texts_free(s->xds_texts, s->nxds_texts);
		s->xds_texts = NULL;
		s->nxds_texts = 0;
	}
	sluice_envoy_xds_set_pending(s->xds && !s->xds_texts);
}

/* trigger (SLUICE_RELOAD_*): what started it, named in the log line and
 * the metric; the domains of envoy.xds from texts.  0, or -1 with why in
 * err. */
static int reload_from(sluice_server_t *s, int trigger,
		       const sluice_envoy_text_t *texts, size_t n, char *err,
		       size_t errlen)
{
	/* "SIGHUP: reloaded ...", "envoy.config_dir changed: reloaded ..." */
	const char *why = trigger == SLUICE_RELOAD_SIGHUP ? "SIGHUP"
			  : trigger == SLUICE_RELOAD_XDS
				  ? "envoy.xds update"
				  : "envoy.config_dir changed";
	const sluice_config_t *run = s->boot->cfg;
	sluice_config_t *cfg;
	sluice_live_t *live;
	sluice_xds_t *old_xds;
	char fields[96];
	unsigned i;
	int switched;

	if (!s->opts->config_path) {
		sluice_log_warn("%s: running the built-in default config; "
				"nothing to reload",
				why);
		snprintf(err, errlen, "no config file to reload");
		return -1;
	}
	cfg = sluice_serve_load_config(s->opts, texts, n, err, errlen);
	switched = cfg ? xds_follow(s, cfg, trigger, &old_xds, err, errlen) : 0;
	if (!cfg || switched < 0) {
		sluice_config_free(cfg);
		sluice_metrics_reload(0, trigger);
		sluice_log_error("%s: reload rejected, keeping the "
				 "running config: %s",
				 why, err);
		return -1;
	}
	sluice_config_restart_fields(cfg, run, fields, sizeof(fields));
	sluice_serve_warn_admin_exposure(cfg, run);
	/* Each key keeps its usage across a changed limit. */
	if (sluice_config_carry(cfg, s->live ? s->live->cfg : NULL,
				sluice_now_us()) < 0)
		sluice_log_warn("SIGHUP: out of memory noting the changed "
				"limits; some keys start their new limits "
				"full");
	live = sluice_live_new(cfg);
	if (switched)
		xds_switched(s, old_xds);
	if (!live) {
		sluice_metrics_reload(0, trigger);
		sluice_log_error("%s: out of memory, keeping the config", why);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (i = 0; i < s->nworkers; i++) {
		sluice_worker_t *w = &s->workers[i];
		sluice_live_t *prev;

		sluice_live_ref(live);
		prev = atomic_exchange(&w->next_live, live);
		sluice_live_unref(prev); /* never picked up */
		uv_async_send(&w->wakeup);
	}
	sluice_live_unref(s->live);
	s->live = live;
	/* What the directory was before this load read it (SIGHUP too). */
	s->envoy_stamp = envoy_loaded_stamp(s);
	sluice_metrics_reload(1, trigger);
	if (fields[0])
		sluice_log_info("%s: reloaded %s (%zu rules); not applied "
				"until a restart: %s",
				why, cfg->path, cfg->nrules, fields);
	else
		sluice_log_info("%s: reloaded %s (%zu rules)", why, cfg->path,
				cfg->nrules);
	return 0;
}

static void reload(sluice_server_t *s, int trigger)
{
	char err[512];

	reload_from(s, trigger, s->xds_texts, s->nxds_texts, err, sizeof(err));
}

/* A control plane's resources: applied as a reload that takes its
 * domains from them; kept (for later reloads) once accepted. */
static int on_xds(void *arg, sluice_envoy_text_t *texts, size_t n, char *err,
		  size_t errlen)
{
	sluice_server_t *s = arg;

	if (s->stopping ||
	    reload_from(s, SLUICE_RELOAD_XDS, texts, n, err, errlen) < 0) {
		if (s->stopping)
			snprintf(err, errlen, "sluice is stopping");
		sluice_envoy_texts_free(texts, n);
		return -1;
	}
	sluice_envoy_texts_free(s->xds_texts, s->nxds_texts);
	s->xds_texts = texts;
	s->nxds_texts = n;
	return 0;
}
/* ------------------------------------------------------------- workers */

/* How often to look for idle connections: a quarter of the timeout, so a
 * connection is closed at most 25% late. */
static uint64_t sweep_period(unsigned idle_timeout_ms)
{
	uint64_t period = idle_timeout_ms / 4;

	if (period < 20)
		period = 20;
	return period > 1000 ? 1000 : period;
}

/* The drain is over: close what keeps the loop alive, the store client
 * included (a network store must be closed on its loop's thread). */
static void worker_finish(sluice_worker_t *w)
{
	if (uv_is_closing((uv_handle_t *)&w->wakeup))
		return;
	uv_close((uv_handle_t *)&w->sweep, NULL);
	uv_close((uv_handle_t *)&w->wakeup, NULL);
	sluice_loop_lag_close(&w->lag, NULL);
	sluice_backend_close(&w->svc.backend);
}

static void on_sweep(uv_timer_t *timer);

static void on_lag(void *arg, uint64_t lag_ns)
{
	sluice_worker_t *w = arg;

	sluice_metrics_loop_lag(w->svc.metrics, lag_ns);
}

static void on_wakeup(uv_async_t *a)
{
	sluice_worker_t *w = a->data;
	sluice_live_t *live = atomic_exchange(&w->next_live, NULL);

	if (live) {
		sluice_live_unref(w->svc.live);
		w->svc.live = live;
		if (!uv_is_closing((uv_handle_t *)&w->sweep)) {
			uint64_t p = sweep_period(
				sluice_config_idle_timeout_ms(live->cfg));

			uv_timer_start(&w->sweep, on_sweep, p, p);
		}
	}
	if (atomic_load(&w->drain) && !w->svc.draining) {
		if (w->listening) {
			uv_close((uv_handle_t *)&w->listener, NULL);
			w->listening = 0;
		}
		if (w->admin_listening) {
			uv_close((uv_handle_t *)&w->admin_listener, NULL);
			w->admin_listening = 0;
		}
		sluice_tcp_drain(w);
		if (w->grpc)
			sluice_grpc_drain(w->grpc);
	}
	if (w->svc.draining && w->nconns == 0 &&
	    sluice_grpc_nconns(w->grpc) == 0)
		worker_finish(w);
}

static void on_sweep(uv_timer_t *timer)
{
	sluice_worker_t *w = timer->data;

	sluice_tcp_sweep(w);
	if (w->grpc)
		sluice_grpc_sweep(w->grpc, w->drain_deadline_ms);
	if (w->svc.draining && w->nconns == 0 &&
	    sluice_grpc_nconns(w->grpc) == 0)
		worker_finish(w);
}

static void worker_main(void *arg)
{
	sluice_worker_t *w = arg;

	uv_run(&w->loop, UV_RUN_DEFAULT);
	/* Normally nothing is left: the drain closed every handle. */
	sluice_tcp_close_all(w);
	if (w->grpc)
		sluice_grpc_close_all(w->grpc);
	sluice_backend_close(&w->svc.backend);
	uv_run(&w->loop, UV_RUN_DEFAULT);
}

static int worker_init(sluice_server_t *s, sluice_worker_t *w, unsigned id,
		       int fd, int *grpc_fd, char *err, size_t errlen)
{
	unsigned timeout = sluice_config_idle_timeout_ms(s->live->cfg);
	uint64_t period;
	int r;

	w->server = s;
	w->id = id;
	w->fd = fd;
	sluice_tcp_tls_hold(); /* dropped by worker_fini() */
	w->conns.prev = w->conns.next = &w->conns;
	w->held_budget = SLUICE_HELD_BUDGET / s->nworkers;
	atomic_init(&w->next_live, NULL);
	atomic_init(&w->drain, 0);
	w->svc.stats_store = s->store;
	/* The take the thread's requests borrow (NULL: each its own). */
	w->svc.spare = sluice_take_new();
	w->svc.live = s->live;
	sluice_live_ref(s->live);
	w->svc.metrics = sluice_metrics_new();
	if (!w->svc.metrics) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if ((r = uv_loop_init(&w->loop)) < 0) {
		snprintf(err, errlen, "uv_loop_init: %s", uv_strerror(r));
		return -1;
	}
	if (sluice_backend_open(&w->svc.backend, &s->live->cfg->store, &w->loop,
				s->store, s->shm, err, errlen) < 0)
		return -1;
	uv_tcp_init(&w->loop, &w->listener);
	w->listener.data = w;
	if ((r = uv_tcp_open(&w->listener, fd)) < 0 ||
	    (r = uv_listen((uv_stream_t *)&w->listener, SOMAXCONN,
			   sluice_tcp_on_connection)) < 0) {
		snprintf(err, errlen, "listen: %s", uv_strerror(r));
		return -1;
	}
	w->listening = 1;
	if (*grpc_fd >= 0) {
		/* Taken over, whether or not it works out. */
		w->grpc =
			sluice_grpc_new(&w->loop, &w->svc, *grpc_fd,
					s->live->cfg->grpc.listen, err, errlen);
		*grpc_fd = -1;
		if (!w->grpc)
			return -1;
	}
	uv_timer_init(&w->loop, &w->sweep);
	w->sweep.data = w;
	period = sweep_period(timeout);
	uv_timer_start(&w->sweep, on_sweep, period, period);
	uv_async_init(&w->loop, &w->wakeup, on_wakeup);
	w->wakeup.data = w;
	sluice_loop_lag_start(&w->lag, &w->loop, 100, on_lag, w);
	return 0;
}

/* admin.listen: one socket, on the first worker's loop; the admin
 * endpoints are then served there only (admin_apart). */
static int admin_listener(sluice_server_t *s, const char *addr, char *err,
			  size_t errlen)
{
	sluice_worker_t *w = &s->workers[0];
	int fd = sluice_listen_socket(addr, 1, err, errlen), r;
	unsigned i;

	if (fd < 0)
		return -1;
	uv_tcp_init(&w->loop, &w->admin_listener);
	w->admin_listener.data = w;
	w->admin_listening = 1; /* the handle is to be closed from now on */
	if ((r = uv_tcp_open(&w->admin_listener, fd)) < 0 ||
	    (r = uv_listen((uv_stream_t *)&w->admin_listener, SOMAXCONN,
			   sluice_tcp_on_connection)) < 0) {
		snprintf(err, errlen, "listen %s: %s", addr, uv_strerror(r));
		return -1;
	}
	for (i = 0; i < s->nworkers; i++)
		s->workers[i].admin_apart = 1;
	return 0;
}

static void worker_fini(sluice_worker_t *w)
{
	sluice_tcp_tls_drop();
	sluice_grpc_free(w->grpc);
	w->grpc = NULL;
	sluice_backend_close(&w->svc.backend);
	sluice_live_unref(w->svc.live);
	sluice_live_unref(atomic_exchange(&w->next_live, NULL));
	sluice_take_free(w->svc.spare);
	w->svc.spare = NULL;
	if (uv_loop_close(&w->loop) < 0)
		sluice_log_warn("thread %u: handles left open at exit", w->id);
}

/* --------------------------------------------------- envoy.config_dir */

static void on_envoy_watch(uv_timer_t *t);

/* Polls again after the running config's watch_ms (a reload may change
 * it, or drop the section). */
static void envoy_watch_arm(sluice_server_t *s)
{
	if (envoy_dir(s))
		uv_timer_start(&s->envoy_watch, on_envoy_watch,
			       s->live->cfg->envoy->settings.watch_ms, 0);
}

static void on_envoy_watch(uv_timer_t *t)
{
	sluice_server_t *s = t->data;
	const char *dir = envoy_dir(s);
	uint64_t stamp = dir ? sluice_envoy_dir_stamp(dir) : 0;

	if (dir && stamp != s->envoy_stamp) {
		/* Once per change: a bad file is logged once, not every
		 * poll, and the next change tries again.  A reload that
		 * succeeds keeps the stamp its loader took before reading
		 * (reload()), so a file rewritten while it read is seen at
		 * the next poll, never taken for what was loaded. */
		s->envoy_stamp = stamp;
		sluice_log_info("envoy.config_dir %s changed: reloading", dir);
		reload(s, SLUICE_RELOAD_CONFIG_DIR);
	}
	envoy_watch_arm(s);
}

/* envoy.statsd: a flush every flush_ms of the running config (a reload
 * may change it, add or drop it: looked at each second without one). */
static void on_statsd(uv_timer_t *t)
{
	sluice_server_t *s = t->data;
	const sluice_envoy_config_t *e = s->live->cfg->envoy;

	sluice_statsd_flush(e ? &e->settings : NULL);
	uv_timer_start(&s->statsd, on_statsd,
		       e && e->settings.statsd_addr
			       ? e->settings.statsd_flush_ms
			       : 1000,
		       0);
}

/* ------------------------------------------------------------- signals */

static void on_signal(uv_signal_t *sig, int signum)
{
	sluice_server_t *s = sig->data;
	unsigned i;

	if (signum == SIGHUP) {
		reload(s, SLUICE_RELOAD_SIGHUP);
		return;
	}
	if (s->stopping)
		return;
	s->stopping = 1;
	sluice_log_info("%s: draining connections, then exiting",
			signum == SIGTERM ? "SIGTERM" : "SIGINT");
	for (i = 0; i < s->nworkers; i++) {
		atomic_store(&s->workers[i].drain, 1);
		uv_async_send(&s->workers[i].wakeup);
	}
	uv_close((uv_handle_t *)&s->sighup, NULL);
	sluice_xds_stop(s->xds);
	s->xds = NULL;
	uv_close((uv_handle_t *)&s->envoy_watch, NULL);
	uv_close((uv_handle_t *)&s->statsd, NULL);
	uv_close((uv_handle_t *)&s->sigterm, NULL);
	uv_close((uv_handle_t *)&s->sigint, NULL);
}

/* ------------------------------------------------------------- startup */

/* 10,000 idle connections need 10,000 descriptors: take what we may. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			sluice_log_warn("cannot raise the open-file limit: %s",
					strerror(errno));
	}
}

/* The process's stores (the host's shared store when configured, the
 * memory store of the stats) and the live config over cfg, which it then
 * owns; else the exit status (cfg freed): 2 for a shared store that
 * cannot be used (a configuration error, like a bad config file), 1 when
 * memory is short. */
static int open_stores(sluice_server_t *s, sluice_config_t *cfg)
{
	char err[512];

	if (cfg->store.kind == SLUICE_STORE_SHARED &&
	    sluice_shmstore_open_group(
		    &s->shm, cfg->store.shm_path, cfg->store.max_keys,
		    cfg->store.shm_group, err, sizeof(err)) != 0) {
		sluice_log_error("store.shared: %s", err);
		sluice_config_free(cfg);
		return 2;
	}
	sluice_memstore_open(&s->store, sluice_config_max_keys(cfg), NULL, 0);
	s->live = s->store ? sluice_live_new(cfg) : NULL;
	if (!s->live) {
		if (!s->store)
			sluice_config_free(cfg);
		sluice_log_error("out of memory");
		sluice_memstore_free(s->store);
		sluice_shmstore_close(s->shm);
		return 1;
	}
	return 0;
}

/* Each worker's listening sockets (HTTP, and gRPC when configured; the
 * first worker's gRPC socket in *grpc_first) and its loop; -1 (said in
 * the log) when one fails, s->nworkers then the workers to clean up. */
static int workers_listen(sluice_server_t *s, const sluice_config_t *cfg,
			  int *grpc_first)
{
	char err[512];
	unsigned i;

	for (i = 0; i < s->nworkers; i++) {
		int fd = sluice_listen_socket(cfg->listen, i == 0, err,
					      sizeof(err));
		int gfd = -1;

		if (fd >= 0 && cfg->grpc.listen &&
		    (gfd = sluice_grpc_socket(cfg->grpc.listen, *grpc_first,
					      err, sizeof(err))) < 0) {
			close(fd);
			fd = -1;
		}
		if (i == 0)
			*grpc_first = gfd;
		if (fd < 0 || worker_init(s, &s->workers[i], i, fd, &gfd, err,
					  sizeof(err))) {
			sluice_log_error("%s", err);
			if (fd >= 0 && !s->workers[i].listening)
				close(fd);
			if (gfd >= 0)
				close(gfd);
			s->nworkers = i + (fd >= 0);
			return -1;
		}
	}
	return 0;
}

/* The main thread's loop: the signals, the envoy files' watch and the
 * statsd timer. */
static void main_loop_init(sluice_server_t *s)
{
	s->main_loop = uv_default_loop();
	uv_signal_init(s->main_loop, &s->sighup);
	uv_signal_init(s->main_loop, &s->sigterm);
	uv_signal_init(s->main_loop, &s->sigint);
	s->sighup.data = s->sigterm.data = s->sigint.data = s;
	uv_signal_start(&s->sighup, on_signal, SIGHUP);
	uv_signal_start(&s->sigterm, on_signal, SIGTERM);
	uv_signal_start(&s->sigint, on_signal, SIGINT);
	uv_timer_init(s->main_loop, &s->envoy_watch);
	s->envoy_watch.data = s;
	s->envoy_stamp = envoy_loaded_stamp(s);
	envoy_watch_arm(s);
	uv_timer_init(s->main_loop, &s->statsd);
	s->statsd.data = s;
	uv_timer_start(&s->statsd, on_statsd, 1000, 0);
}

/* A worker whose thread never ran: its handles closed on its own loop,
 * here. */
static void worker_close_unrun(sluice_worker_t *w)
{
	uv_close((uv_handle_t *)&w->listener, NULL);
	if (w->admin_listening)
		uv_close((uv_handle_t *)&w->admin_listener, NULL);
	if (w->grpc)
		sluice_grpc_close_all(w->grpc);
	if (w->sweep.data)
		uv_close((uv_handle_t *)&w->sweep, NULL);
	if (w->wakeup.data)
		uv_close((uv_handle_t *)&w->wakeup, NULL);
	uv_run(&w->loop, UV_RUN_DEFAULT);
}

/* Each worker's thread: how many started (fewer than s->nworkers: the
 * next one could not, said in the log). */
static unsigned workers_start(sluice_server_t *s)
{
	unsigned i;

	for (i = 0; i < s->nworkers; i++)
		if (uv_thread_create(&s->workers[i].thread, worker_main,
				     &s->workers[i]) < 0) {
			sluice_log_error("cannot start thread %u", i);
			break;
		}
	return i;
}

/* The workers' array, each one's listening sockets (the first's gRPC
 * socket in *grpc_first) and the admin listener: 0, or -1 said in the
 * log. */
static int server_listen(sluice_server_t *s, const sluice_config_t *cfg,
			 int *grpc_first)
{
	char err[512];

	s->nworkers = cfg->threads;
	s->workers = calloc(s->nworkers, sizeof(*s->workers));
	if (!s->workers) {
		sluice_log_error("out of memory");
		return -1;
	}
	if (workers_listen(s, cfg, grpc_first) < 0)
		return -1;
	if (cfg->admin_token && cfg->admin_listen &&
	    admin_listener(s, cfg->admin_listen, err, sizeof(err)) < 0) {
		sluice_log_error("admin.%s", err);
		return -1;
	}
	return 0;
}

/* The lines that say the server is up, and what it serves. */
static void log_listening(const sluice_server_t *s, const sluice_config_t *cfg)
{
	if (cfg->grpc.listen)
		sluice_log_info("gRPC (Envoy rate limit service, "
				"health) listening on %s",
				cfg->grpc.listen);
	sluice_log_info("sluice %s listening on %s (%u thread%s, %s "
			"store, %zu rule%s, config %s)",
			SLUICE_VERSION, cfg->listen, s->nworkers,
			s->nworkers == 1 ? "" : "s",
			sluice_config_store_name(cfg), cfg->nrules,
			cfg->nrules == 1 ? "" : "s",
			cfg->path ? cfg->path : "built-in default");
	if (s->workers[0].admin_listening)
		sluice_log_info("admin endpoints listening on %s",
				cfg->admin_listen);
	sluice_serve_warn_admin_exposure(cfg, cfg);
}

/* After the threads stopped (the first `started` of them ran): the
 * workers, the gRPC socket file, the configs and the stores. */
static void server_close(sluice_server_t *s, const sluice_config_t *cfg,
			 unsigned started, int grpc_first)
{
	unsigned i;

	for (i = 0; i < s->nworkers && s->workers; i++) {
		sluice_worker_t *w = &s->workers[i];

		if (i >= started && w->listening)
			worker_close_unrun(w);
		if (w->svc.metrics)
			worker_fini(w);
	}
	free(s->workers);
	if (grpc_first >= 0)
		sluice_grpc_socket_unlink(cfg->grpc.listen);
	sluice_envoy_texts_free(s->xds_texts, s->nxds_texts);
	sluice_live_unref(s->live);
	sluice_live_unref(s->boot);
	sluice_memstore_free(s->store);
	sluice_shmstore_close(s->shm);
}

int sluice_serve(const sluice_serve_opts_t *opts)
{
	sluice_server_t s;
	sluice_config_t *cfg;
	char err[512];
	unsigned i, started = 0;
	int status, grpc_first = -1;

	memset(&s, 0, sizeof(s));
	s.opts = opts;
	sluice_serve_store_events();
	cfg = sluice_serve_load_config(opts, NULL, 0, err, sizeof(err));
	if (!cfg) {
		sluice_log_error("%s", err);
		return 2;
	}
	if (cfg->store.tls.enabled && !cfg->store.tls.verify)
		sluice_log_warn("store: tls.verify is false: Redis "
				"certificates are not checked, so anyone on "
				"the path can pose as the server");
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	status = open_stores(&s, cfg);
	if (status)
		return status;
	s.boot = s.live;
	sluice_live_ref(s.boot);
	if (server_listen(&s, cfg, &grpc_first) < 0) {
		status = 1;
		goto out;
	}

	main_loop_init(&s);
	if (cfg->envoy && cfg->envoy->settings.xds &&
	    !(s.xds = sluice_xds_start(s.main_loop, cfg->envoy->settings.xds,
				       on_xds, &s, err, sizeof(err)))) {
		sluice_log_error("%s", err);
		status = 1;
	}
	started = workers_start(&s);
	if (started < s.nworkers)
		status = 1;
	if (status == 0)
		log_listening(&s, cfg);
	else
		on_signal(&s.sigterm, SIGTERM);
	uv_run(s.main_loop, UV_RUN_DEFAULT);
	for (i = 0; i < started; i++)
		uv_thread_join(&s.workers[i].thread);
	uv_loop_close(s.main_loop);
	if (status == 0)
		sluice_log_info("stopped");
out:
	server_close(&s, cfg, started, grpc_first);
	return status;
}
