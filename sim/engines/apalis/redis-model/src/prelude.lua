-- The Redis 7.0 scripting API, built once per model in the real globals
-- table, before scripts get their read-only view of it (see script.rs).
--
-- Redis implements the functions that can raise errors in C. Here their
-- logic is in Lua or Rust (`prim`), in the table `raising` returned below:
-- each returns (status, value), and script.rs wraps it in a C function that
-- returns the value (status OK), raises it (RAISE: a Redis error table), or
-- raises it as luaL_error would, prefixed with the caller's position
-- (RAISE_AT). Being C functions, they stay on the stack when tail-called,
-- and the error positions name the user's line, as with Redis.

local prim = ...
local select, type, tostring, tonumber = select, type, tostring, tonumber
local rawpcall, floor, ceil, byte = pcall, math.floor, math.ceil, string.byte
local OK, RAISE, RAISE_AT = 0, 1, 2

local function raise(text)
    return RAISE, prim.error_table(text)
end

local raising = { redis = {}, cjson = {}, math = {} }
redis = {}

-- `prim.call` runs a command on the keyspace lent to the interpreter for
-- the script run; it returns (failed, reply-as-Lua-value).
function raising.redis.call(...)
    local failed, reply = prim.call(...)
    return failed and RAISE or OK, reply
end

function raising.redis.pcall(...)
    local _, reply = prim.call(...)
    return OK, reply
end

function redis.error_reply(...)
    local text = ...
    if select('#', ...) ~= 1 or type(text) ~= 'string' then
        return prim.error_table('wrong number or type of arguments')
    end
    if byte(text, 1) ~= 45 then -- '-'
        text = '-' .. text
    end
    return prim.error_table(text)
end

function redis.status_reply(...)
    local text = ...
    if select('#', ...) ~= 1 or type(text) ~= 'string' then
        return prim.error_table('wrong number or type of arguments')
    end
    return { ok = text }
end

function raising.redis.sha1hex(...)
    if select('#', ...) ~= 1 then
        return raise('wrong number of arguments')
    end
    local text = ...
    if type(text) == 'number' then
        text = tostring(text)
    elseif type(text) ~= 'string' then
        text = ''
    end
    return OK, prim.sha1hex(text)
end

-- C's (int) conversion of a Lua number: truncation toward zero.
local function to_int(n)
    if n < 0 then
        return ceil(n)
    end
    return floor(n)
end

redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3

-- Checks its arguments as Redis does; the model keeps no log.
function raising.redis.log(...)
    local n = select('#', ...)
    if n < 2 then
        return raise('redis.log() requires two arguments or more.')
    end
    local level = tonumber((...))
    if level == nil then
        return raise('First argument must be a number (log level).')
    end
    level = to_int(level)
    if level < 0 or level > 3 then
        return raise('Invalid debug level.')
    end
    return OK, nil
end

-- Only RESP2 is modelled: a script asking for RESP3 gets an error.
function raising.redis.setresp(...)
    if select('#', ...) ~= 1 then
        return raise('redis.setresp() requires one argument.')
    end
    local resp = to_int(tonumber((...)) or 0)
    if resp ~= 2 and resp ~= 3 then
        return raise('RESP version must be 2 or 3.')
    end
    if resp == 3 then
        return raise('leasesim model: RESP3 replies in scripts are not modelled')
    end
    return OK, nil
end

redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3

function raising.redis.set_repl(...)
    if select('#', ...) ~= 1 then
        return raise('redis.set_repl() requires two arguments.')
    end
    local flags = to_int(tonumber((...)) or 0)
    if flags < 0 or flags > 3 then
        return raise('Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.')
    end
    return OK, nil
end

function redis.replicate_commands()
    return true
end

function redis.breakpoint()
    return false
end

function redis.debug()
end

-- The default user may run every command; unknown ones are an error.
function raising.redis.acl_check_cmd(...)
    local failed, known = prim.acl_check(...)
    if failed then
        return RAISE, known
    end
    if not known then
        return raise('Invalid command passed to redis.acl_check_cmd()')
    end
    return OK, true
end

redis.REDIS_VERSION = '7.0.15'
redis.REDIS_VERSION_NUM = 458767 -- 0x00070f

-- Redis's pcall hands back the message of a Redis error table, not the table.
local function pcall_result(ok, ...)
    if ok then
        return true, ...
    end
    local err = ...
    if type(err) == 'table' then
        local text = err.err
        if type(text) == 'string' or type(text) == 'number' then
            return false, text
        end
    end
    return false, err
end

function pcall(...)
    return pcall_result(rawpcall(...))
end

cjson = { null = prim.null, _NAME = 'cjson', _VERSION = '2.1.0' }

-- lua-cjson's settings: the model answers with Redis's defaults and does
-- not support changing them (nor cjson.new).
local cjson_defaults = {
    encode_sparse_array = { false, 2, 10 },
    encode_max_depth = { 1000 },
    decode_max_depth = { 1000 },
    encode_number_precision = { 14 },
    encode_keep_buffer = { true },
    encode_invalid_numbers = { false },
    decode_invalid_numbers = { true },
}
for name, values in pairs(cjson_defaults) do
    raising.cjson[name] = function(...)
        if select('#', ...) > 0 then
            return RAISE_AT, 'leasesim model: changing cjson settings is not modelled'
        end
        return OK, values[1]
    end
end

function raising.cjson.encode(...)
    if select('#', ...) ~= 1 then
        return RAISE_AT, "bad argument #1 to 'encode' (expected 1 argument)"
    end
    local ok, result = prim.json_encode((...))
    return ok and OK or RAISE_AT, result
end

function raising.cjson.decode(...)
    if select('#', ...) > 1 then
        return RAISE_AT, "bad argument #2 to 'decode' (found too many arguments)"
    end
    local text = ...
    if type(text) == 'number' then
        text = tostring(text)
    elseif type(text) ~= 'string' then
        local got = select('#', ...) == 0 and 'no value' or type(text)
        return RAISE_AT, "bad argument #1 to 'decode' (string expected, got " .. got .. ')'
    end
    local ok, result = prim.json_decode(text)
    return ok and OK or RAISE_AT, result
end

-- luaL_checkint for math.random's arguments: the number, or nil and the
-- complaint.
local function check_int(value, i, name)
    local n = tonumber(value)
    if n == nil then
        local got = value == nil and 'no value' or type(value)
        return nil, 'bad argument #' .. i .. " to '" .. name .. "' (number expected, got " .. got .. ')'
    end
    return to_int(n)
end

-- Redis's math.random: Lua's, on redisLrand48 (one sequence for the whole
-- server, never reseeded between scripts).
function raising.math.random(...)
    local r = prim.random()
    local n = select('#', ...)
    if n == 0 then
        return OK, r
    elseif n == 1 then
        local u, complaint = check_int((...), 1, 'random')
        if u == nil then
            return RAISE_AT, complaint
        elseif u < 1 then
            return RAISE_AT, "bad argument #1 to 'random' (interval is empty)"
        end
        return OK, floor(r * u) + 1
    elseif n == 2 then
        local l, complaint = check_int((...), 1, 'random')
        if l == nil then
            return RAISE_AT, complaint
        end
        local u, complaint2 = check_int(select(2, ...), 2, 'random')
        if u == nil then
            return RAISE_AT, complaint2
        elseif l > u then
            return RAISE_AT, "bad argument #2 to 'random' (interval is empty)"
        end
        return OK, floor(r * (u - l + 1)) + l
    end
    return RAISE_AT, 'wrong number of arguments'
end

function raising.math.randomseed(...)
    local seed, complaint = check_int((...), 1, 'randomseed')
    if seed == nil then
        return RAISE_AT, complaint
    end
    prim.randomseed(seed)
    return OK, nil
end

-- Redis drops these from the globals.
print, dofile, loadfile = nil, nil, nil

return raising
