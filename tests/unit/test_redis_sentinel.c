/*
 * test_redis_sentinel.c -- the Redis store under Redis Sentinel, against
 * real processes: a master, a replica and three Sentinels.  Decisions
 * flow through the master the Sentinels name; after the master is
 * SIGKILLed and the Sentinels promote the replica, decisions resume there
 * and a bucket drained before the failover is still drained.  A scripted
 * Sentinel (a thread of this test answering the one question the client
 * asks) checks the two other ways a move is noticed: ROLE in the handshake
 * (the Sentinel names a replica) and a READONLY reply (the master demoted
 * under an open connection).  Also: no Sentinel reachable fails calls at
 * once and says so, and bad options are refused.
 */
#include "redis_harness.h"
#include "sluice_redis.h"

#define DOWN_AFTER_MS 1000

typedef struct {
	pid_t pid;
	int port;
} proc_t;

static char dir[64];

/*
 * Another group's Sentinels still running on this machine (a parallel
 * test, another checkout's) know the ports of the servers they watched:
 * one of those ports reused here got our master demoted to a replica of
 * theirs, resynced empty (a drained bucket lost although WAIT had
 * confirmed it).  So this process's master name is its own, and its
 * servers know SLAVEOF and REPLICAOF only by names that its own
 * Sentinels alone are told (as sentinel_harness.py's SentinelGroup does).
 */
static char master_name[64], slaveof_cmd[48], replicaof_cmd[48];

static void name_this_group(void)
{
	unsigned tag = (unsigned)getpid() ^ (unsigned)rh_ms() * 2654435761u;

	snprintf(master_name, sizeof(master_name), "mymaster-%u", tag);
	snprintf(slaveof_cmd, sizeof(slaveof_cmd), "SLAVEOF-%u", tag);
	snprintf(replicaof_cmd, sizeof(replicaof_cmd), "REPLICAOF-%u", tag);
}

/* redis-server on ports[0], a replica of arg (a proc_t) unless NULL. */
static pid_t spawn_redis(const int *ports, void *arg)
{
	const proc_t *master = arg;
	char port[16], mport[16], d[128];
	char *argv[] = {"redis-server",
			"--port",
			port,
			"--bind",
			"127.0.0.1",
			"--save",
			"",
			"--appendonly",
			"no",
			"--dir",
			d,
			"--rename-command",
			"SLAVEOF",
			slaveof_cmd,
			"--rename-command",
			"REPLICAOF",
			replicaof_cmd,
			NULL,
			NULL,
			NULL,
			NULL};

	snprintf(port, sizeof(port), "%d", ports[0]);
	/* A directory each: a replica's full sync leaves a dump.rdb that a
	 * later server started there would load. */
	snprintf(d, sizeof(d), "%s/%d", dir, ports[0]);
	CHECK(mkdir(d, 0700) == 0 || errno == EEXIST);
	if (master) {
		snprintf(mport, sizeof(mport), "%d", master->port);
		argv[17] = "--replicaof";
		argv[18] = "127.0.0.1";
		argv[19] = mport;
	}
	return rh_spawn(argv);
}

static void start_redis(proc_t *p, const proc_t *master)
{
	p->pid = rh_start_on_free_ports(&p->port, 1, NULL, spawn_redis,
					(void *)master);
	if (master) {
		/* In sync with its master before the test goes on (the
		 * master waits 5 s for more replicas before it sends). */
		redisContext *c = rh_connect(p->port);
		int64_t until = rh_ms() + 30000;
		redisReply *rep;
		int up = 0;

		while (!up) {
			CHECK(rh_ms() < until);
			rep = rh_cmd(c, "INFO replication");
			up = strstr(rep->str, "master_link_status:up") != NULL;
			freeReplyObject(rep);
			if (!up)
				rh_sleep_ms(10);
		}
		redisFree(c);
	}
}

/* Which Sentinel to start, and whom it watches. */
typedef struct sentinel_arg_s {
	int master_port, i;
} sentinel_arg_t;

static pid_t spawn_sentinel(const int *ports, void *arg)
{
	const sentinel_arg_t *a = arg;
	char conf[128], port[16];
	char *argv[] = {"redis-server", conf, "--sentinel",
			"--port",	port, NULL};
	FILE *f;

	snprintf(port, sizeof(port), "%d", ports[0]);
	snprintf(conf, sizeof(conf), "%s/sentinel%d.conf", dir, a->i);
	f = fopen(conf, "w");
	CHECK(f != NULL);
	fprintf(f,
		"bind 127.0.0.1\n"
		"dir %s\n"
		"sentinel monitor %s 127.0.0.1 %d 2\n"
		"sentinel down-after-milliseconds %s %d\n"
		"sentinel failover-timeout %s 5000\n"
		"sentinel parallel-syncs %s 1\n"
		"sentinel rename-command %s SLAVEOF %s\n",
		dir, master_name, a->master_port, master_name, DOWN_AFTER_MS,
		master_name, master_name, master_name, slaveof_cmd);
	fclose(f);
	return rh_spawn(argv);
}

static void start_sentinel(proc_t *p, int master_port, int i)
{
	sentinel_arg_t a = {master_port, i};

	p->pid = rh_start_on_free_ports(&p->port, 1, NULL, spawn_sentinel, &a);
}

static void stop(proc_t *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		rh_forget(p->pid);
		p->pid = 0;
	}
}

/* --------------------------------------------------------------- client */

typedef struct {
	unsigned master_changed, no_master;
	char master[80], how[256];
	int64_t changed_ms; /* when the last MASTER_CHANGED came */
} seen_t;

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	seen_t *s = arg;

	if (ev->kind == SLUICE_REDIS_EV_MASTER_CHANGED) {
		s->master_changed++;
		s->changed_ms = rh_ms();
		snprintf(s->master, sizeof(s->master), "%s", ev->node);
		snprintf(s->how, sizeof(s->how), "%s", ev->detail);
	} else if (ev->kind == SLUICE_REDIS_EV_NO_MASTER) {
		s->no_master++;
	}
}

static sluice_redis_t *client_waiting(uv_loop_t *loop, const proc_t *sentinels,
				      size_t n, seen_t *seen,
				      unsigned timeout_ms)
{
	static char addrs[3][32];
	static const char *ptrs[3];
	sluice_redis_sentinel_t s = {0};
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char err[256];
	size_t i;

	for (i = 0; i < n; i++) {
		snprintf(addrs[i], sizeof(addrs[i]), "127.0.0.1:%d",
			 sentinels[i].port);
		ptrs[i] = addrs[i];
	}
	s.master = master_name;
	s.addrs = ptrs;
	s.naddrs = n;
	o.sentinel = &s;
	o.timeout_ms = timeout_ms;
	o.on_event = on_event;
	o.event_arg = seen;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

static sluice_redis_t *client(uv_loop_t *loop, const proc_t *sentinels,
			      size_t n, seen_t *seen)
{
	return client_waiting(loop, sentinels, n, seen, 500);
}

/* The replica has everything the master wrote (WAIT on the master). */
static void replicated(const proc_t *master)
{
	redisContext *c = rh_connect(master->port);
	redisReply *rep = rh_cmd(c, "WAIT 1 30000");

	CHECK(rep->type == REDIS_REPLY_INTEGER && rep->integer == 1);
	freeReplyObject(rep);
	redisFree(c);
}

/* ---------------------------------------------------------------- tests */

static void test_failover(void)
{
	proc_t master, replica, sentinels[3];
	char master_addr[32], replica_addr[32];
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	int64_t killed, gap;
	result_t res;
	int i;

	start_redis(&master, NULL);
	start_redis(&replica, &master);
	for (i = 0; i < 3; i++)
		start_sentinel(&sentinels[i], master.port, i);
	snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%d", master.port);
	snprintf(replica_addr, sizeof(replica_addr), "127.0.0.1:%d",
		 replica.port);

	uv_loop_init(&loop);
	r = client(&loop, sentinels, 3, &seen);
	CHECK(rh_wait_healthy(&loop, r, 10000));
	CHECK(seen.master_changed == 1);
	CHECK(strcmp(seen.master, master_addr) == 0);
	rh_limit(&l, 3, "1/h");
	for (i = 0; i < 3; i++)
		CHECK(rh_take(&loop, r, "drained", &l, 1, 1).allowed);
	CHECK(!rh_take(&loop, r, "drained", &l, 1, 1).allowed);
	replicated(&master);

	stop(&master);
	killed = rh_ms();
	/* Decisions fail (the caller's fail mode) until the Sentinels have
	 * promoted the replica, then resume there. */
	for (;;) {
		res = rh_take(&loop, r, "fresh", &l, 1, 0);
		if (res.status == 0)
			break;
		CHECK(rh_ms() - killed < 60000);
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(20);
	}
	gap = rh_ms() - killed;
	CHECK(strcmp(seen.master, replica_addr) == 0);
	/* At least the one change to the replica.  On a loaded host a
	 * Sentinel that has not yet seen the failover can name the old
	 * master again while its peers name the new one (the client then
	 * follows it and back): more changes, the same end. */
	if (seen.master_changed != 2)
		printf("failover: %u master changes (Sentinels disagreed for a "
		       "while)\n",
		       seen.master_changed);
	CHECK(seen.master_changed >= 2);
	/* The replica had the bucket: still drained. */
	res = rh_take(&loop, r, "drained", &l, 1, 1);
	CHECK(res.status == 0 && !res.allowed && res.d.remaining == 0);
	CHECK(rh_take(&loop, r, "fresh", &l, 1, 1).allowed);
	printf("failover: decisions resumed %lld ms after the master was "
	       "killed (Sentinels' down-after-milliseconds %d), %lld ms after "
	       "the client learnt the new master: %s\n",
	       (long long)gap, DOWN_AFTER_MS,
	       (long long)(killed + gap - seen.changed_ms), seen.how);

	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	for (i = 0; i < 3; i++)
		stop(&sentinels[i]);
	stop(&replica);
	printf("decisions follow the master across a failover\n");
}

/* ------------------------------------------------- a scripted Sentinel */

/* Answers SENTINEL get-master-addr-by-name with 127.0.0.1:<names>, AUTH
 * and anything else with +OK, and SUBSCRIBE with its confirmation (it
 * never publishes: moves are noticed only by ROLE and READONLY). */
static struct {
	int lfd, port;
	volatile int names;	 /* the port it names */
	volatile int asked;	 /* questions answered */
	volatile int subscribes; /* SUBSCRIBEs answered */
	volatile int mute;	 /* answers nothing (hangs) */
	volatile int slow_ms;	 /* waits this long before naming */
	volatile int stopped;	 /* the test is over */
} fake;

static void fake_reply(int fd, const redisReply *cmd)
{
	char buf[256];
	int n;

	if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements < 1)
		return;
	if (cmd->elements >= 2 &&
	    strcasecmp(cmd->element[0]->str, "SENTINEL") == 0) {
		char port[16];

		if (fake.slow_ms)
			rh_sleep_ms(fake.slow_ms);
		snprintf(port, sizeof(port), "%d", fake.names);
		n = snprintf(buf, sizeof(buf),
			     "*2\r\n$9\r\n127.0.0.1\r\n$%zu\r\n%s\r\n",
			     strlen(port), port);
		__sync_fetch_and_add(&fake.asked, 1);
	} else if (strcasecmp(cmd->element[0]->str, "SUBSCRIBE") == 0) {
		__sync_fetch_and_add(&fake.subscribes, 1);
		n = snprintf(buf, sizeof(buf),
			     "*3\r\n$9\r\nsubscribe\r\n$14\r\n"
			     "+switch-master\r\n:1\r\n");
	} else {
		n = snprintf(buf, sizeof(buf), "+OK\r\n");
	}
	if (write(fd, buf, (size_t)n) != n)
		return;
}

static void *fake_client(void *arg)
{
	int fd = (int)(intptr_t)arg;
	redisReader *rd = redisReaderCreate();
	char buf[4096];
	ssize_t n;
	void *cmd;

	while (!fake.stopped && (n = read(fd, buf, sizeof(buf))) > 0) {
		redisReaderFeed(rd, buf, (size_t)n);
		while (redisReaderGetReply(rd, &cmd) == REDIS_OK && cmd) {
			if (!fake.mute)
				fake_reply(fd, cmd);
			freeReplyObject(cmd);
		}
	}
	redisReaderFree(rd);
	close(fd);
	return NULL;
}

static void *fake_accept(void *arg)
{
	(void)arg;
	while (!fake.stopped) {
		int fd = accept(fake.lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0)
			continue;
		pthread_create(&t, NULL, fake_client, (void *)(intptr_t)fd);
		pthread_detach(t);
	}
	return NULL;
}

static void fake_start(int names)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	pthread_t t;
	int one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fake.lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fake.lfd >= 0);
	setsockopt(fake.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(fake.lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(fake.lfd, (struct sockaddr *)&a, &len) == 0);
	CHECK(listen(fake.lfd, 16) == 0);
	fake.port = ntohs(a.sin_port);
	fake.names = names;
	pthread_create(&t, NULL, fake_accept, NULL);
	pthread_detach(t);
}

static void cli(int port, const char *cmd)
{
	redisContext *c = rh_connect(port);

	freeReplyObject(rh_cmd(c, cmd));
	redisFree(c);
}

static long long keys_on(int port)
{
	redisContext *c = rh_connect(port);
	redisReply *rep = rh_cmd(c, "DBSIZE");
	long long n = rep->integer;

	freeReplyObject(rep);
	redisFree(c);
	return n;
}

/* A listening socket nobody accepts on: connects succeed, nothing is
 * ever answered.  Its port. */
static int hung_start(int *fd)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	*fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(*fd >= 0);
	CHECK(bind(*fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(*fd, (struct sockaddr *)&a, &len) == 0);
	CHECK(listen(*fd, 16) == 0);
	return ntohs(a.sin_port);
}

static void test_role_and_readonly(void)
{
	proc_t a, b, sentinels[2];
	int64_t until;
	int hung, subs;
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	result_t res;
	char cmd[64];
	int i;

	start_redis(&a, NULL);
	start_redis(&b, &a);
	/* The first Sentinel listed accepts and never answers (hung): it is
	 * skipped.  The second first names b, a replica: ROLE refuses it,
	 * the client asks again, and by then the Sentinel names a. */
	fake_start(b.port);
	sentinels[0].port = hung_start(&hung);
	sentinels[1].port = fake.port;
	uv_loop_init(&loop);
	r = client(&loop, sentinels, 2, &seen);
	until = rh_ms() + 10000;
	while (fake.asked < 1) {
		CHECK(rh_ms() < until); /* the hung one must not stall it */
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	fake.names = a.port;
	CHECK(rh_wait_healthy(&loop, r, 10000));
	CHECK(fake.asked >= 2);
	rh_limit(&l, 3, "1/h");
	for (i = 0; i < 3; i++)
		CHECK(rh_take(&loop, r, "drained", &l, 1, 1).allowed);
	CHECK(keys_on(a.port) == 1);
	replicated(&a);

	/* A hand-made failover the client hears nothing of: b promoted,
	 * a demoted under the client's open connection.  The next write is
	 * answered READONLY, the client asks the Sentinel, moves to b and
	 * sends the call there, within its deadline. */
	fake.names = b.port;
	snprintf(cmd, sizeof(cmd), "%s NO ONE", replicaof_cmd);
	cli(b.port, cmd);
	snprintf(cmd, sizeof(cmd), "%s 127.0.0.1 %d", replicaof_cmd, b.port);
	cli(a.port, cmd);
	res = rh_take(&loop, r, "drained", &l, 1, 1);
	if (res.status != 0) /* the move may take two calls' time */
		res = rh_take(&loop, r, "drained", &l, 1, 1);
	CHECK(res.status == 0 && !res.allowed);
	res = rh_take(&loop, r, "fresh", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed);
	CHECK(seen.master_changed >= 3);
	snprintf(cmd, sizeof(cmd), "127.0.0.1:%d", b.port);
	CHECK(strcmp(seen.master, cmd) == 0);

	/* The Sentinel subscribed to hangs: its subscription's PING goes
	 * unanswered, the client drops it and asks again, and once a
	 * Sentinel answers it subscribes again.  Decisions go on
	 * meanwhile: the master did not move. */
	subs = fake.subscribes;
	CHECK(subs >= 1);
	fake.mute = 1;
	rh_run_for(&loop, 3500);
	CHECK(rh_take(&loop, r, "while-hung", &l, 1, 1).allowed);
	fake.mute = 0;
	until = rh_ms() + 10000;
	while (fake.subscribes == subs) {
		CHECK(rh_ms() < until);
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	rh_close_client(&loop, r);

	/* The same hand-made failover back (a promoted, b demoted), for a
	 * client whose calls may wait 5 s, and a Sentinel that takes 600
	 * ms to answer: the write answered READONLY waits for the answer
	 * and is decided on a, well past the 20 retries 5 ms apart that
	 * used to end it with SLUICE_ESTORE at about 100 ms. */
	r = client_waiting(&loop, sentinels, 2, &seen, 5000);
	CHECK(rh_wait_healthy(&loop, r, 10000));
	CHECK(rh_take(&loop, r, "before-slow", &l, 1, 1).allowed);
	fake.slow_ms = 600;
	fake.names = a.port;
	snprintf(cmd, sizeof(cmd), "%s NO ONE", replicaof_cmd);
	cli(a.port, cmd);
	snprintf(cmd, sizeof(cmd), "%s 127.0.0.1 %d", replicaof_cmd, a.port);
	cli(b.port, cmd);
	res = rh_take(&loop, r, "after-slow", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed);
	CHECK(keys_on(a.port) >= 1);
	snprintf(cmd, sizeof(cmd), "127.0.0.1:%d", a.port);
	CHECK(strcmp(seen.master, cmd) == 0);
	fake.slow_ms = 0;
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	fake.stopped = 1;
	close(fake.lfd);
	close(hung);
	stop(&a);
	stop(&b);
	printf("a hung Sentinel is skipped; a replica named as master is "
	       "refused (ROLE); a master demoted under the client is left on "
	       "READONLY; a hung subscription is replaced\n");
}

/* A take made as soon as the client is opened (a process or an nginx
 * worker just started), before any Sentinel has answered: it waits for
 * their answer within its deadline and is decided by the master, not
 * failed as if no master were known. */
static void test_first_take_waits_for_the_sentinels(void)
{
	proc_t master, sentinel;
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	result_t res;

	start_redis(&master, NULL);
	start_sentinel(&sentinel, master.port, 0);
	uv_loop_init(&loop);
	/* A generous deadline: the Sentinel's answer is all it waits for. */
	r = client_waiting(&loop, &sentinel, 1, &seen, 10000);
	rh_limit(&l, 2, "1/h");
	res = rh_take(&loop, r, "first", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed);
	CHECK(seen.master_changed == 1 && seen.no_master == 0);
	CHECK(rh_take(&loop, r, "first", &l, 1, 1).allowed);
	CHECK(!rh_take(&loop, r, "first", &l, 1, 1).allowed);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	stop(&sentinel);
	stop(&master);
	printf("a take before the Sentinels answered: decided by the master\n");
}

static void test_no_sentinel(void)
{
	proc_t gone[2];
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	result_t res;
	int64_t until;

	/* Ports nobody listens on. */
	gone[0].port = rh_free_port();
	gone[1].port = rh_free_port();
	uv_loop_init(&loop);
	r = client(&loop, gone, 2, &seen);
	until = rh_ms() + 5000;
	while (!seen.no_master && rh_ms() < until) {
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(seen.no_master == 1);
	CHECK(!sluice_redis_healthy(r));
	rh_limit(&l, 3, "1/h");
	res = rh_take(&loop, r, "k", &l, 1, 1);
	CHECK(res.status == SLUICE_ESTORE);
	/* Asked again and again: still reported once. */
	until = rh_ms() + 1500;
	while (rh_ms() < until) {
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(seen.no_master == 1);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("no Sentinel: calls fail at once, said once\n");
}

static void expect_bad(const sluice_redis_sentinel_t *s, const char *url,
		       const char *msg)
{
	sluice_redis_opts_t o = {0};

	o.url = url;
	o.sentinel = s;
	rh_expect_refused(&o, msg);
}

static void test_bad_options(void)
{
	const char *good[] = {"127.0.0.1:26379"};
	const char *noport[] = {"127.0.0.1"};
	sluice_redis_sentinel_t s = {
		.master = "mymaster", .addrs = good, .naddrs = 1};

	s.master = NULL;
	expect_bad(&s, NULL, "a master name is needed");
	s.master = "mymaster";
	s.naddrs = 0;
	expect_bad(&s, NULL, "no Sentinel addresses");
	s.naddrs = 1;
	s.addrs = noport;
	expect_bad(&s, NULL, "expected host:port");
	s.addrs = good;
	expect_bad(&s, "unix:///tmp/redis.sock", "credentials only");
	printf("bad Sentinel options are refused\n");
}

int main(void)
{
	atexit(rh_cleanup);
	strcpy(dir, "/tmp/sluice-sentinel-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	name_this_group();
	test_bad_options();
	test_no_sentinel();
	test_first_take_waits_for_the_sentinels();
	test_role_and_readonly();
	test_failover();
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	printf("ok\n");
	return 0;
}
