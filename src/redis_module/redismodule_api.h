/*
 * redismodule_api.h -- the part of the Redis module API that sluice-redis.so
 * uses, declared here because Debian ships no redismodule.h.
 *
 * Supported servers: Redis 7.0 and later (Debian 12 has 7.0.15).  Every
 * function below is documented in the Redis modules API reference and
 * exists in 7.0.0, except RedisModule_CachedMicroseconds (7.2.0), which is
 * optional: when the server does not export it the module reads the server
 * process's clock in microseconds (see module.c).
 *
 * The mechanism is the one the official header uses: the first word of the
 * RedisModuleCtx handed to RedisModule_OnLoad() is a pointer to the server's
 * RedisModule_GetApi(), which resolves each API function by its name
 * ("RedisModule_Call", ...) into a function pointer.  The pointers are
 * defined in api.c and filled by sluice_rm_api_init().  The constants below
 * are part of the stable module ABI (they have not changed since 4.0).
 */
#ifndef SLUICE_REDISMODULE_API_H
#define SLUICE_REDISMODULE_API_H

#include <stddef.h>

#define REDISMODULE_OK	     0
#define REDISMODULE_ERR	     1
#define REDISMODULE_APIVER_1 1

/* RedisModule_OpenKey() modes */
#define REDISMODULE_READ  (1 << 0)
#define REDISMODULE_WRITE (1 << 1)

/* RedisModule_NotifyKeyspaceEvent() classes */
#define REDISMODULE_NOTIFY_GENERIC (1 << 2)
#define REDISMODULE_NOTIFY_STRING  (1 << 3)

/* RedisModule_SetModuleOptions(): keys opened for writing are not signalled
 * as modified (WATCH, client tracking) on close; the module signals the
 * keys it really writes with RedisModule_SignalModifiedKey(). */
#define REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED (1 << 1)

/* RedisModule_KeyType() */
#define REDISMODULE_KEYTYPE_EMPTY  0
#define REDISMODULE_KEYTYPE_STRING 1

/* RedisModule_CallReplyType() */
#define REDISMODULE_REPLY_UNKNOWN (-1)
#define REDISMODULE_REPLY_STRING  0
#define REDISMODULE_REPLY_ERROR	  1
#define REDISMODULE_REPLY_INTEGER 2
#define REDISMODULE_REPLY_ARRAY	  3
#define REDISMODULE_REPLY_NULL	  4

#define REDISMODULE_ERRORMSG_WRONGTYPE                                         \
	"WRONGTYPE Operation against a key holding the wrong kind of value"

/* Opaque server objects. */
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleServerInfoData RedisModuleServerInfoData;

typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv,
				  int argc);

/* The module's entry point, called by the server on MODULE LOAD. */
int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* ------------------------------------------------ resolved at load time */

extern int (*RedisModule_GetApi)(const char *name, void *funcptr);
extern int (*RedisModule_SetModuleAttribs)(RedisModuleCtx *ctx,
					   const char *name, int ver,
					   int apiver);
extern int (*RedisModule_IsModuleNameBusy)(const char *name);
extern int (*RedisModule_CreateCommand)(RedisModuleCtx *ctx, const char *name,
					RedisModuleCmdFunc cmdfunc,
					const char *strflags, int firstkey,
					int lastkey, int keystep);
extern void (*RedisModule_Log)(RedisModuleCtx *ctx, const char *level,
			       const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Replies to the calling client. */
extern int (*RedisModule_ReplyWithArray)(RedisModuleCtx *ctx, long len);
extern int (*RedisModule_ReplyWithLongLong)(RedisModuleCtx *ctx, long long ll);
extern int (*RedisModule_ReplyWithError)(RedisModuleCtx *ctx, const char *err);
extern int (*RedisModule_ReplyWithSimpleString)(RedisModuleCtx *ctx,
						const char *msg);
extern int (*RedisModule_ReplyWithCallReply)(RedisModuleCtx *ctx,
					     RedisModuleCallReply *reply);

/* Arguments. */
extern const char *(*RedisModule_StringPtrLen)(const RedisModuleString *str,
					       size_t *len);

/* Keys for Redis Cluster routing of commands flagged "getkeys-api". */
extern int (*RedisModule_IsKeysPositionRequest)(RedisModuleCtx *ctx);
extern void (*RedisModule_KeyAtPos)(RedisModuleCtx *ctx, int pos);

/* Key type checks.  OpenKey() in READ mode returns NULL for a missing
 * key; KeyType() and CloseKey() accept NULL. */
extern RedisModuleKey *(*RedisModule_OpenKey)(RedisModuleCtx *ctx,
					      RedisModuleString *keyname,
					      int mode);
extern void (*RedisModule_CloseKey)(RedisModuleKey *key);
extern int (*RedisModule_KeyType)(RedisModuleKey *key);

/* The low-level key API (all in 7.0.0).  StringSet() stores the string
 * object as given; SetAbsExpire() takes UNIX time in milliseconds;
 * StringDMA() in READ mode returns the bytes of a string value (converting
 * an int-encoded value to a raw string first, see state.c). */
extern char *(*RedisModule_StringDMA)(RedisModuleKey *key, size_t *len,
				      int mode);
extern int (*RedisModule_StringSet)(RedisModuleKey *key,
				    RedisModuleString *str);
extern int (*RedisModule_SetAbsExpire)(RedisModuleKey *key, long long expire);
extern RedisModuleString *(*RedisModule_CreateStringFromLongLong)(
	RedisModuleCtx *ctx, long long ll);
extern RedisModuleString *(*RedisModule_CreateString)(RedisModuleCtx *ctx,
						      const char *ptr,
						      size_t len);
extern void (*RedisModule_FreeString)(RedisModuleCtx *ctx,
				      RedisModuleString *str);
/* Raises the reference count of str (with ctx NULL): one more
 * RedisModule_FreeString(NULL, str) is then needed to release it. */
extern void (*RedisModule_RetainString)(RedisModuleCtx *ctx,
					RedisModuleString *str);
extern void *(*RedisModule_Alloc)(size_t bytes);
extern void (*RedisModule_Free)(void *ptr);
extern int (*RedisModule_SignalModifiedKey)(RedisModuleCtx *ctx,
					    RedisModuleString *keyname);
extern int (*RedisModule_NotifyKeyspaceEvent)(RedisModuleCtx *ctx, int type,
					      const char *event,
					      RedisModuleString *key);
extern void (*RedisModule_SetModuleOptions)(RedisModuleCtx *ctx, int options);
/* A section of INFO, its fields read by name, then freed. */
extern RedisModuleServerInfoData *(*RedisModule_GetServerInfo)(
	RedisModuleCtx *ctx, const char *section);
extern long long (*RedisModule_ServerInfoGetFieldSigned)(
	RedisModuleServerInfoData *data, const char *field, int *out_err);
extern void (*RedisModule_FreeServerInfo)(RedisModuleCtx *ctx,
					  RedisModuleServerInfoData *data);
/* Propagates a command to replicas and the AOF (inside MULTI/EXEC when a
 * command propagates several).  Format "s" arguments, and the elements of
 * a "v" vector (RedisModuleString **, size_t count), are kept by reference
 * (their reference count raised), not copied. */
extern int (*RedisModule_Replicate)(RedisModuleCtx *ctx, const char *cmdname,
				    const char *fmt, ...);

/* Running a server command (GET, SET) from inside the module.  The "!"
 * format flag replicates the command to replicas and the AOF. */
extern RedisModuleCallReply *(*RedisModule_Call)(RedisModuleCtx *ctx,
						 const char *cmdname,
						 const char *fmt, ...);
extern void (*RedisModule_FreeCallReply)(RedisModuleCallReply *reply);
extern int (*RedisModule_CallReplyType)(RedisModuleCallReply *reply);
extern const char *(*RedisModule_CallReplyStringPtr)(
	RedisModuleCallReply *reply, size_t *len);

/* The server clock: UNIX time in microseconds, cached when the command
 * started.  Redis 7.2+; NULL on older servers. */
extern long long (*RedisModule_CachedMicroseconds)(void);
/* The server's version, 0x00MMmmpp (Redis 6.0.9 and later). */
extern int (*RedisModule_GetServerVersion)(void);

/*
 * Resolves every pointer above from the server behind ctx and registers the
 * module name.  Returns REDISMODULE_OK, or REDISMODULE_ERR when a required
 * function is missing (the server is older than 7.0) or the name is taken.
 */
int sluice_rm_api_init(RedisModuleCtx *ctx, const char *name, int ver);

#endif /* SLUICE_REDISMODULE_API_H */
