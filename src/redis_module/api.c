/*
 * api.c -- the module API function pointers and their lookup by name, as
 * the official redismodule.h does it (see redismodule_api.h).
 */
#include "redis_module/redismodule_api.h"

int (*RedisModule_GetApi)(const char *, void *);
int (*RedisModule_SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
int (*RedisModule_IsModuleNameBusy)(const char *);
int (*RedisModule_CreateCommand)(RedisModuleCtx *, const char *,
				 RedisModuleCmdFunc, const char *, int, int,
				 int);
void (*RedisModule_Log)(RedisModuleCtx *, const char *, const char *, ...);
int (*RedisModule_ReplyWithArray)(RedisModuleCtx *, long);
int (*RedisModule_ReplyWithLongLong)(RedisModuleCtx *, long long);
int (*RedisModule_ReplyWithError)(RedisModuleCtx *, const char *);
int (*RedisModule_ReplyWithSimpleString)(RedisModuleCtx *, const char *);
int (*RedisModule_ReplyWithCallReply)(RedisModuleCtx *, RedisModuleCallReply *);
const char *(*RedisModule_StringPtrLen)(const RedisModuleString *, size_t *);
int (*RedisModule_IsKeysPositionRequest)(RedisModuleCtx *);
void (*RedisModule_KeyAtPos)(RedisModuleCtx *, int);
RedisModuleKey *(*RedisModule_OpenKey)(RedisModuleCtx *, RedisModuleString *,
				       int);
void (*RedisModule_CloseKey)(RedisModuleKey *);
int (*RedisModule_KeyType)(RedisModuleKey *);
RedisModuleCallReply *(*RedisModule_Call)(RedisModuleCtx *, const char *,
					  const char *, ...);
void (*RedisModule_FreeCallReply)(RedisModuleCallReply *);
int (*RedisModule_CallReplyType)(RedisModuleCallReply *);
const char *(*RedisModule_CallReplyStringPtr)(RedisModuleCallReply *, size_t *);
long long (*RedisModule_CachedMicroseconds)(void);
int (*RedisModule_GetServerVersion)(void);
char *(*RedisModule_StringDMA)(RedisModuleKey *, size_t *, int);
int (*RedisModule_StringSet)(RedisModuleKey *, RedisModuleString *);
int (*RedisModule_SetAbsExpire)(RedisModuleKey *, long long);
RedisModuleString *(*RedisModule_CreateStringFromLongLong)(RedisModuleCtx *,
							   long long);
RedisModuleString *(*RedisModule_CreateString)(RedisModuleCtx *, const char *,
					       size_t);
void (*RedisModule_FreeString)(RedisModuleCtx *, RedisModuleString *);
void (*RedisModule_RetainString)(RedisModuleCtx *, RedisModuleString *);
void *(*RedisModule_Alloc)(size_t);
void (*RedisModule_Free)(void *);
int (*RedisModule_SignalModifiedKey)(RedisModuleCtx *, RedisModuleString *);
int (*RedisModule_NotifyKeyspaceEvent)(RedisModuleCtx *, int, const char *,
				       RedisModuleString *);
void (*RedisModule_SetModuleOptions)(RedisModuleCtx *, int);
RedisModuleServerInfoData *(*RedisModule_GetServerInfo)(RedisModuleCtx *,
							const char *);
long long (*RedisModule_ServerInfoGetFieldSigned)(RedisModuleServerInfoData *,
						  const char *, int *);
void (*RedisModule_FreeServerInfo)(RedisModuleCtx *,
				   RedisModuleServerInfoData *);
int (*RedisModule_Replicate)(RedisModuleCtx *, const char *, const char *, ...);

/* Looks up RedisModule_<name>; on failure the pointer stays NULL. */
#define GET_API(name)                                                          \
	RedisModule_GetApi("RedisModule_" #name, (void *)&RedisModule_##name)

int sluice_rm_api_init(RedisModuleCtx *ctx, const char *name, int ver)
{
	/* The server puts its GetApi() in the first word of the context. */
	void *getapi = ((void **)ctx)[0];
	int missing = 0;

	RedisModule_GetApi = (int (*)(const char *, void *))getapi;
	missing |= GET_API(SetModuleAttribs);
	missing |= GET_API(CreateCommand);
	missing |= GET_API(Log);
	missing |= GET_API(ReplyWithArray);
	missing |= GET_API(ReplyWithLongLong);
	missing |= GET_API(ReplyWithError);
	missing |= GET_API(ReplyWithSimpleString);
	missing |= GET_API(ReplyWithCallReply);
	missing |= GET_API(StringPtrLen);
	missing |= GET_API(IsKeysPositionRequest);
	missing |= GET_API(KeyAtPos);
	missing |= GET_API(OpenKey);
	missing |= GET_API(CloseKey);
	missing |= GET_API(KeyType);
	missing |= GET_API(Call);
	missing |= GET_API(FreeCallReply);
	missing |= GET_API(CallReplyType);
	missing |= GET_API(CallReplyStringPtr);
	missing |= GET_API(StringDMA);
	missing |= GET_API(StringSet);
	missing |= GET_API(SetAbsExpire);
	missing |= GET_API(CreateStringFromLongLong);
	missing |= GET_API(CreateString);
	missing |= GET_API(FreeString);
	missing |= GET_API(RetainString);
	missing |= GET_API(Alloc);
	missing |= GET_API(Free);
	missing |= GET_API(SignalModifiedKey);
	missing |= GET_API(NotifyKeyspaceEvent);
	missing |= GET_API(SetModuleOptions);
	missing |= GET_API(GetServerInfo);
	missing |= GET_API(ServerInfoGetFieldSigned);
	missing |= GET_API(FreeServerInfo);
	missing |= GET_API(Replicate);
	/* Optional: newer servers only. */
	if (GET_API(CachedMicroseconds) != REDISMODULE_OK)
		RedisModule_CachedMicroseconds = 0;
	if (GET_API(GetServerVersion) != REDISMODULE_OK)
		RedisModule_GetServerVersion = 0;
	if (GET_API(IsModuleNameBusy) != REDISMODULE_OK)
		RedisModule_IsModuleNameBusy = 0;
	if (missing)
		return REDISMODULE_ERR;
	if (RedisModule_IsModuleNameBusy && RedisModule_IsModuleNameBusy(name))
		return REDISMODULE_ERR;
	RedisModule_SetModuleAttribs(ctx, name, ver, REDISMODULE_APIVER_1);
	return REDISMODULE_OK;
}
