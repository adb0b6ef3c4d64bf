/*
 * test_redis_harness.c -- the C harness's own promise: a server whose
 * chosen port is taken between choosing and binding starts on another
 * one (rh_start_on_free_ports()), and the delaying proxy binds a port
 * nobody can take first (port 0).
 *
 * The first port handed out is one this test listens on itself, as
 * someone else's server on the machine would.
 */
#include "redis_harness.h"

static int taken_port, offered;

/* The taken port first, then truly free ones. */
static int taken_first(void)
{
	if (!offered) {
		offered = 1;
		return taken_port;
	}
	return rh_free_port();
}

/* A socket listening on a loopback port the kernel picked. */
static int listen_somewhere(int *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	CHECK(listen(fd, 16) == 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static void test_redis_starts_on_another_port_when_one_is_taken(void)
{
	rh_redis_t s = {0};
	int fd = listen_somewhere(&taken_port);

	offered = 0;
	s.pid = rh_start_on_free_ports(&s.port, 1, taken_first, rh_redis_spawn,
				       &s);
	CHECK(offered);
	CHECK(s.port != taken_port);
	/* The server answering there is ours. */
	CHECK(rh_server_pid(s.port) == (long)s.pid);
	rh_redis_stop(&s);
	close(fd);
}

static void test_proxy_binds_a_port_of_its_own(void)
{
	rh_redis_t s = {0};
	redisContext *c;
	redisReply *rep;
	int port = 0;
	pid_t proxy;

	rh_redis_start(&s, 0, 0);
	proxy = rh_proxy_start(&port, s.port, 1);
	CHECK(port > 0 && port != s.port);
	c = rh_connect(port);
	rep = rh_cmd(c, "PING");
	CHECK(rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0);
	freeReplyObject(rep);
	redisFree(c);
	rh_proc_kill(proxy);
	rh_redis_stop(&s);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_redis_starts_on_another_port_when_one_is_taken);
	RUN(test_proxy_binds_a_port_of_its_own);
	TESTS_DONE();
}
