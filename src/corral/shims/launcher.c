/* Corral's compiled shim launcher: sbatch, squeue, ... as a small native program.
 *
 * Does what corral/shims/lean.py does, without starting a Python interpreter: one
 * POST /api/v1/shim/exec to the controller (its Unix socket, where SO_PEERCRED names the
 * caller, or http:// with CORRAL_TOKEN), carrying argv, the environment, the working
 * directory and, when the controller asks for them, the files and stdin the command reads;
 * then it prints the command's stdout and stderr and exits with its status. The request
 * body is byte for byte the one lean.py builds (same JSON, same key order, non-ASCII as
 * \uXXXX escapes, undecodable bytes as \udcXX like Python's surrogateescape), so the
 * controller cannot tell the two apart; messages for transport errors are lean.py's.
 *
 * Whatever this program does not handle itself it hands to the Python shim by exec,
 * before anything was sent: srun/salloc (streaming, interactive), CORRAL_SHIM_LOCAL,
 * https:// (TLS), a controller that cannot be reached (Python then words the error), an
 * old controller without the endpoint (404), an environment too odd to ship, several
 * controllers in CORRAL_URL (HA: Python finds the leader), and a standby's 503 (it did
 * nothing; Python follows it to the leader).
 *
 * Safety: it runs as the calling user and trusts nothing it reads. Every buffer grows
 * through buf_grow, which checks for overflow against a hard cap; files are read up to
 * MAX_FILE_BYTES like lean.py; the reply is read up to MAX_REPLY_BYTES and its frame
 * lengths are checked against what arrived. Built by `corral shims install` (install.py)
 * with the system cc; the install step writes corral_launcher_config.h (the Python
 * fallback) and patches the command name into CMD_SLOT of each copy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include "corral_launcher_config.h" /* CORRAL_PYTHON, CORRAL_PYPROG */

#define MAX_FILE_BYTES ((size_t)64 * 1024 * 1024)
#define MAX_REPLY_BYTES ((size_t)1024 * 1024 * 1024)
#define MAX_BODY_BYTES ((size_t)1536 * 1024 * 1024)
#define MAX_ENV_ENTRIES 4096 /* more: the Python shim (the duplicate check is quadratic) */
#define MAX_FILES 256
#define MAX_ROUNDS 4
#define TIMEOUT_S 60
#define API_PATH "/api/v1/shim/exec"
#define SYSTEM_STATE_DIR "/var/lib/corral"
#define SOCKET_NAME "corral.sock"

/* "# corral-shim cmd=" then 24 NULs: install.py writes the command's name there (and
 * recognises its own files by the marker). volatile: the compiler must read it. */
static volatile const char CMD_SLOT[42] = "# corral-shim cmd=";
#define CMD_OFFSET 18
#define CMD_MAX 23

static char g_cmd[CMD_MAX + 1];
static int g_argc;
static char **g_argv;

extern char **environ;

/* ---- growable byte buffer ------------------------------------------------------------ */
typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void die_msg(const char *msg) {
    /* lean.py: sys.stderr.write(f"{cmd}: error: {exc}\n"); sys.exit(1) */
    dprintf(2, "%s: error: %s\n", g_cmd, msg);
    exit(1);
}

static void buf_grow(buf *b, size_t extra, size_t limit) {
    if (extra > limit || b->n > limit - extra)
        die_msg("request or reply too large");
    size_t need = b->n + extra;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap > limit / 2 ? limit : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p)
        die_msg("out of memory");
    b->p = p;
    b->cap = cap;
}

static void buf_add(buf *b, const void *s, size_t n) {
    buf_grow(b, n, MAX_BODY_BYTES);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void buf_str(buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static char *xstrdup(const char *s) {
    char *d = strdup(s);
    if (!d)
        die_msg("out of memory");
    return d;
}

/* ---- UTF-8 and JSON ------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (code point in *cp), or 0 when invalid; then
 * *bad is the length of the maximal invalid prefix (one U+FFFD under 'replace'). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp, size_t *bad) {
    unsigned c = s[0];
    *bad = 1;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else return 0;
    uint32_t v = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < len; i++) {
        if (i >= n)
            return 0;
        unsigned d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF))
            return 0;
        *bad = i + 1;
        v = (v << 6) | (d & 0x3F);
    }
    *cp = v;
    return len;
}

static void json_u(buf *b, uint32_t u) {
    char t[8];
    snprintf(t, sizeof t, "\\u%04x", (unsigned)u);
    buf_add(b, t, 6);
}

/* A JSON string of bytes decoded as UTF-8 with surrogateescape, written the way Python's
 * json encode_basestring_ascii writes it. */
static void json_bytes(buf *b, const char *s0, size_t n) {
    const unsigned char *s = (const unsigned char *)s0;
    buf_add(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n && s[i] >= 0x20 && s[i] <= 0x7E && s[i] != '"' && s[i] != '\\')
            i++;
        if (i > start)
            buf_add(b, s + start, i - start);
        if (i >= n)
            break;
        uint32_t cp;
        size_t bad;
        size_t len = utf8_next(s + i, n - i, &cp, &bad);
        if (!len) {
            json_u(b, 0xDC00u | s[i]);
            i++;
            continue;
        }
        i += len;
        switch (cp) {
        case '"': buf_str(b, "\\\""); break;
        case '\\': buf_str(b, "\\\\"); break;
        case '\n': buf_str(b, "\\n"); break;
        case '\r': buf_str(b, "\\r"); break;
        case '\t': buf_str(b, "\\t"); break;
        case '\b': buf_str(b, "\\b"); break;
        case '\f': buf_str(b, "\\f"); break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                json_u(b, 0xD800u | (v >> 10));
                json_u(b, 0xDC00u | (v & 0x3FF));
            } else {
                json_u(b, cp);
            }
        }
    }
    buf_add(b, "\"", 1);
}

static void json_cstr(buf *b, const char *s) { json_bytes(b, s, strlen(s)); }

/* ---- the Python fallback ------------------------------------------------------------- */
static void exec_python(void) {
    /* python -IS -c PROG CMD ARGS...: PROG pops CMD from sys.argv and calls lean.main */
    if ((size_t)g_argc > ((size_t)-1) / sizeof(char *) - 8)
        die_msg("too many arguments");
    char **av = calloc((size_t)g_argc + 5, sizeof(char *));
    if (!av)
        die_msg("out of memory");
    av[0] = (char *)CORRAL_PYTHON;
    av[1] = (char *)"-IS";
    av[2] = (char *)"-c";
    av[3] = (char *)CORRAL_PYPROG;
    av[4] = g_cmd;
    for (int i = 1; i < g_argc; i++)
        av[4 + i] = g_argv[i];
    av[4 + g_argc] = NULL;
    execv(CORRAL_PYTHON, av);
    dprintf(2, "%s: error: cannot run the Python shim %s: %s\n", g_cmd, CORRAL_PYTHON,
            strerror(errno));
    exit(1);
}

/* ---- where the controller is (lean.controller_address) ------------------------------- */
static const char *env_nonempty(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static char *join2(const char *a, const char *b) {
    /* os.path.join(a, b) for one component */
    size_t la = strlen(a), lb = strlen(b);
    char *out = malloc(la + lb + 2);
    if (!out)
        die_msg("out of memory");
    if (b[0] == '/') {
        memcpy(out, b, lb + 1);
    } else if (la == 0 || a[la - 1] == '/') {
        memcpy(out, a, la);
        memcpy(out + la, b, lb + 1);
    } else {
        memcpy(out, a, la);
        out[la] = '/';
        memcpy(out + la + 1, b, lb + 1);
    }
    return out;
}

static char *home_dir(void) {
    /* env HOME or os.path.expanduser("~") */
    const char *h = env_nonempty("HOME");
    if (h)
        return xstrdup(h);
    const char *raw = getenv("HOME");
    const char *base = raw; /* HOME="" -> expanduser gives "/" */
    if (!raw) {
        struct passwd *pw = getpwuid(getuid());
        if (!pw || !pw->pw_dir)
            return xstrdup("~");
        base = pw->pw_dir;
    }
    char *d = xstrdup(base);
    if (!d)
        die_msg("out of memory");
    size_t l = strlen(d);
    while (l > 0 && d[l - 1] == '/')
        d[--l] = 0;
    if (!l) {
        free(d);
        return xstrdup("/");
    }
    return d;
}

static char *default_state_dir(void) {
    const char *explicit_dir = env_nonempty("CORRAL_STATE_DIR");
    if (explicit_dir)
        return xstrdup(explicit_dir);
    if (geteuid() == 0)
        return xstrdup(SYSTEM_STATE_DIR);
    const char *xdg = env_nonempty("XDG_STATE_HOME");
    char *base;
    if (xdg) {
        base = xstrdup(xdg);
    } else {
        char *h = home_dir();
        if (!h)
            die_msg("out of memory");
        char *l = join2(h, ".local");
        base = join2(l, "state");
        free(h);
        free(l);
    }
    if (!base)
        die_msg("out of memory");
    char *out = join2(base, "corral");
    free(base);
    return out;
}

enum { ADDR_UNIX, ADDR_TCP };

static int controller_address(char **where) {
    const char *url = getenv("CORRAL_URL");
    if (!url)
        url = "";
    if (strchr(url, ','))
        exec_python(); /* several controllers (HA): the Python shim finds the leader */
    if (!strncmp(url, "http://", 7)) {
        const char *h = url + 7;
        *where = strndup(h, strcspn(h, "/"));
        return ADDR_TCP;
    }
    if (!strncmp(url, "https://", 8))
        exec_python(); /* TLS: the Python shim verifies the controller */
    if (!strncmp(url, "unix:", 5)) {
        *where = xstrdup(url + 5);
        return ADDR_UNIX;
    }
    const char *sock = env_nonempty("CORRAL_SOCKET");
    if (sock) {
        *where = xstrdup(sock);
        return ADDR_UNIX;
    }
    char *sd = default_state_dir();
    char *first = join2(sd, SOCKET_NAME);
    free(sd);
    struct stat st;
    if (stat(first, &st) != 0 && stat(SYSTEM_STATE_DIR "/" SOCKET_NAME, &st) == 0) {
        free(first);
        first = xstrdup(SYSTEM_STATE_DIR "/" SOCKET_NAME);
    }
    *where = first;
    return ADDR_UNIX;
}

static void set_timeouts(int fd) {
    struct timeval tv = {TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* A connected socket, or -1: then the caller hands over to Python, which words the error
 * exactly as lean.py does (nothing has been sent). */
static int connect_controller(void) {
    char *where = NULL;
    int kind = controller_address(&where);
    if (!where)
        die_msg("out of memory");
    int fd = -1;
    if (kind == ADDR_UNIX) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        size_t l = strlen(where);
        if (l == 0 || l >= sizeof sa.sun_path)
            goto out;
        memcpy(sa.sun_path, where, l);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            goto out;
        set_timeouts(fd);
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            fd = -1;
        }
    } else {
        char *colon = strrchr(where, ':');
        const char *host = where, *port = "80";
        if (colon) {
            *colon = 0;
            port = colon[1] ? colon + 1 : "80";
        }
        if (!*host)
            host = "127.0.0.1";
        for (const char *p = port; *p; p++)
            if (*p < '0' || *p > '9')
                goto out;
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
            goto out;
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0) {
            set_timeouts(fd);
            if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(res);
    }
out:
    free(where);
    return fd;
}

/* ---- the request --------------------------------------------------------------------- */
typedef struct {
    char *path;
    size_t path_len;
    int ok;
    char *data; /* text, or the error message */
    size_t len;
} file_entry;

static char *g_cwd;
static file_entry g_files[MAX_FILES];
static size_t g_nfiles;
static char *g_stdin; /* NULL: not read (JSON null) */
static size_t g_stdin_len;

static void oserror_text(char *out, size_t cap, int err, const char *what) {
    /* str(OSError) as lean.py prints it after "lost the connection ...: " */
    if (err == EAGAIN || err == EWOULDBLOCK)
        snprintf(out, cap, "%s: timed out", what);
    else
        snprintf(out, cap, "%s: [Errno %d] %s", what, err, strerror(err));
}

static int g_step_io; /* srun: the request carries step_io (launcher_srun.c) */
static void step_io_json(buf *b);

static void build_body(buf *b) {
    buf_str(b, "{\"v\":1,\"cmd\":");
    json_cstr(b, g_cmd);
    buf_str(b, ",\"argv\":[");
    for (int i = 1; i < g_argc; i++) {
        if (i > 1)
            buf_add(b, ",", 1);
        json_cstr(b, g_argv[i]);
    }
    buf_str(b, "],\"cwd\":");
    json_cstr(b, g_cwd);
    buf_str(b, ",\"env\":{");
    /* dict(os.environ): entries with '=', the first of duplicate names wins */
    size_t count = 0;
    for (char **e = environ; *e; e++)
        count++;
    if (count > MAX_ENV_ENTRIES)
        exec_python();
    int first = 1;
    for (size_t i = 0; environ[i]; i++) {
        const char *eq = strchr(environ[i], '=');
        if (!eq)
            continue;
        size_t kl = (size_t)(eq - environ[i]);
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++) {
            const char *eq2 = strchr(environ[j], '=');
            dup = eq2 && (size_t)(eq2 - environ[j]) == kl && !memcmp(environ[j], environ[i], kl);
        }
        if (dup)
            continue;
        if (!first)
            buf_add(b, ",", 1);
        first = 0;
        json_bytes(b, environ[i], kl);
        buf_add(b, ":", 1);
        json_cstr(b, eq + 1);
    }
    buf_str(b, "},\"files\":{");
    for (size_t i = 0; i < g_nfiles; i++) {
        if (i)
            buf_add(b, ",", 1);
        json_bytes(b, g_files[i].path, g_files[i].path_len);
        buf_str(b, g_files[i].ok ? ":[true," : ":[false,");
        json_bytes(b, g_files[i].data, g_files[i].len);
        buf_add(b, "]", 1);
    }
    buf_str(b, "},\"stdin\":");
    if (g_stdin)
        json_bytes(b, g_stdin, g_stdin_len);
    else
        buf_str(b, "null");
    if (g_step_io)
        step_io_json(b);
    buf_add(b, "}", 1);
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The request's head: POST path, the body's length, the bearer token if any. Returns
 * -1 when the token is not plain ASCII (the Python shim then words it). */
static int http_head(buf *head, const char *path, size_t body_len) {
    char num[32];
    snprintf(num, sizeof num, "%zu", body_len);
    buf_str(head, "POST ");
    buf_str(head, path);
    buf_str(head, " HTTP/1.1\r\nHost: corral\r\n"
                  "Content-Type: application/json\r\nAccept: application/x-corral-shim\r\n"
                  "Content-Length: ");
    buf_str(head, num);
    buf_str(head, "\r\n");
    const char *token = getenv("CORRAL_TOKEN");
    if (token && *token) {
        for (const unsigned char *t = (const unsigned char *)token; *t; t++)
            if (*t < 0x20 || *t > 0x7E)
                return -1; /* lean.py's latin-1 rules; never inject header lines */
        buf_str(head, "Authorization: Bearer ");
        buf_str(head, token);
        buf_str(head, "\r\n");
    }
    buf_str(head, "Connection: close\r\n\r\n");
    return 0;
}

/* One request; the raw reply in *reply. Returns 0, or -1 when the controller could not be
 * reached (nothing sent). Transport errors after connecting end the program. */
static int http_exchange(const char *path, const buf *body, buf *reply) {
    int fd = connect_controller();
    if (fd < 0)
        return -1;
    buf head = {0};
    if (http_head(&head, path, body->n) < 0) {
        close(fd);
        exec_python();
    }
    char msg[512];
    /* a send that fails (the controller refused the request before reading it all, 413)
     * still leaves its answer to read: lean.py does the same */
    buf_add(&head, body->p, body->n); /* one write: the controller reads it in one go */
    int sent = send_all(fd, head.p, head.n);
    free(head.p);
    reply->n = 0;
    for (;;) {
        buf_grow(reply, 262144, MAX_REPLY_BYTES + 262144);
        ssize_t r = recv(fd, reply->p + reply->n, 262144, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            oserror_text(msg, sizeof msg, sent ? sent : errno,
                         "lost the connection to the Corral controller");
            die_msg(msg);
        }
        if (r == 0)
            break;
        reply->n += (size_t)r;
        if (reply->n > MAX_REPLY_BYTES)
            die_msg("reply from the Corral controller too large");
    }
    close(fd);
    if (sent && reply->n == 0) {
        oserror_text(msg, sizeof msg, sent, "lost the connection to the Corral controller");
        die_msg(msg);
    }
    return 0;
}

/* A request whose answer does not matter (srun's step end): errors are ignored, the
 * answer is read (so the controller finishes it) and dropped. */
static void http_post_quiet(const char *path, const buf *body) {
    int fd = connect_controller();
    if (fd < 0)
        return;
    buf head = {0};
    if (http_head(&head, path, body->n) == 0) {
        buf_add(&head, body->p, body->n);
        if (send_all(fd, head.p, head.n) == 0) {
            char sink[4096];
            while (recv(fd, sink, sizeof sink, 0) > 0)
                ;
        }
    }
    free(head.p);
    close(fd);
}

static const char *memfind(const char *h, size_t hn, const char *needle, size_t nn) {
    if (nn > hn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, nn))
            return h + i;
    return NULL;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* Status and payload of an HTTP reply (lean.http_request's parsing, chunked included). */
static int parse_http(buf *reply, char **payload, size_t *plen) {
    const char *sep = memfind(reply->p, reply->n, "\r\n\r\n", 4);
    if (!sep)
        die_msg("incomplete reply from the Corral controller");
    size_t hlen = (size_t)(sep - reply->p);
    char *pl = (char *)sep + 4;
    size_t pn = reply->n - hlen - 4;
    /* status line: second whitespace-separated word, all digits */
    const char *eol = memfind(reply->p, hlen, "\r\n", 2);
    size_t l0 = eol ? (size_t)(eol - reply->p) : hlen;
    size_t i = 0;
    while (i < l0 && (is_ws(reply->p[i]) || reply->p[i] == '\r' || reply->p[i] == '\n'))
        i++;
    while (i < l0 && !is_ws(reply->p[i]))
        i++;
    while (i < l0 && is_ws(reply->p[i]))
        i++;
    size_t d0 = i;
    long status = 0;
    while (i < l0 && reply->p[i] >= '0' && reply->p[i] <= '9') {
        if (i - d0 < 9)
            status = status * 10 + (reply->p[i] - '0');
        i++;
    }
    if (i == d0 || i - d0 > 9 || (i < l0 && !is_ws(reply->p[i])))
        die_msg("malformed reply from the Corral controller");
    /* Transfer-Encoding: chunked? */
    int chunked = 0;
    const char *line = eol ? eol + 2 : reply->p + hlen;
    const char *end = reply->p + hlen;
    while (line < end) {
        const char *le = memfind(line, (size_t)(end - line), "\r\n", 2);
        if (!le)
            le = end;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (colon) {
            const char *a = line, *z = colon;
            while (a < z && is_ws(*a)) a++;
            while (z > a && is_ws(z[-1])) z--;
            if ((size_t)(z - a) == 17 && !strncasecmp(a, "transfer-encoding", 17))
                for (const char *c = colon; !chunked && c + 7 <= le; c++)
                    chunked = !strncasecmp(c, "chunked", 7);
        }
        line = le + 2;
    }
    if (chunked) {
        size_t pos = 0, out = 0;
        for (;;) {
            const char *e = memfind(pl + pos, pn - pos, "\r\n", 2);
            if (!e)
                break;
            size_t size = 0;
            const char *c = pl + pos;
            int digits = 0;
            for (; c < e && *c != ';'; c++) {
                int v = (*c >= '0' && *c <= '9') ? *c - '0'
                        : (*c >= 'a' && *c <= 'f') ? *c - 'a' + 10
                        : (*c >= 'A' && *c <= 'F') ? *c - 'A' + 10 : -1;
                if (v < 0 || size > (SIZE_MAX >> 4))
                    die_msg("malformed reply from the Corral controller");
                size = size * 16 + (size_t)v;
                digits = 1;
            }
            if (!digits)
                die_msg("malformed reply from the Corral controller");
            if (size == 0)
                break;
            size_t data = (size_t)(e - pl) + 2;
            if (data > pn)
                break;
            size_t take = size < pn - data ? size : pn - data;
            memmove(pl + out, pl + data, take);
            out += take;
            if (take < size || data + size + 2 > pn)
                break;
            pos = data + size + 2;
        }
        pn = out;
    }
    *payload = pl;
    *plen = pn;
    return (int)status;
}

/* ---- reading what the command asked for ---------------------------------------------- */
static int read_fd_all(int fd, size_t limit, char **out, size_t *len) {
    buf b = {0};
    for (;;) {
        if (b.n > limit)
            break;
        buf_grow(&b, 65536, limit + 65536);
        ssize_t r = read(fd, b.p + b.n, 65536);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(b.p);
            return e;
        }
        if (r == 0)
            break;
        b.n += (size_t)r;
    }
    *out = b.p ? b.p : xstrdup("");
    *len = b.n;
    return 0;
}

static void read_file_entry(file_entry *f) {
    /* lean.read_file: [True, text] or [False, strerror]; "File too large" past the cap */
    char *full = f->path[0] == '/' ? xstrdup(f->path) : join2(g_cwd, f->path);
    if (!full)
        die_msg("out of memory");
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    free(full);
    int err = fd < 0 ? errno : 0;
    if (!err) {
        err = read_fd_all(fd, MAX_FILE_BYTES, &f->data, &f->len);
        close(fd);
    }
    if (err) {
        f->ok = 0;
        f->data = xstrdup(strerror(err));
        f->len = strlen(f->data);
        return;
    }
    if (f->len > MAX_FILE_BYTES) {
        free(f->data);
        f->ok = 0;
        f->data = xstrdup("File too large");
        f->len = strlen(f->data);
        return;
    }
    f->ok = 1;
}

static void read_stdin(void) {
    free(g_stdin);
    g_stdin = NULL;
    int err = read_fd_all(0, MAX_FILE_BYTES, &g_stdin, &g_stdin_len);
    if (err) {
        char msg[256];
        snprintf(msg, sizeof msg, "cannot read stdin: %s", strerror(err));
        die_msg(msg);
    }
    if (g_stdin_len > MAX_FILE_BYTES)
        die_msg("stdin too large (over 64 MiB)");
}

/* ---- the answer ---------------------------------------------------------------------- */
static void write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static int parse_len(const char *s, const char *e, size_t *out, int allow_sign) {
    int neg = 0;
    if (allow_sign && s < e && (*s == '-' || *s == '+')) {
        neg = *s == '-';
        s++;
    }
    if (s >= e)
        return -1;
    size_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9' || v > (SIZE_MAX - 9) / 10)
            return -1;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return neg;
}

/* "the Corral controller answered HTTP N: " + payload decoded ('replace'), stripped,
 * cut at 500 characters: lean.py's wording of a non-200 answer. */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static void die_http(int status, const char *p, size_t n) {
    uint32_t *cps = calloc(n + 1, sizeof(uint32_t));
    if (!cps)
        die_msg("out of memory");
    size_t k = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad, len = utf8_next((const unsigned char *)p + i, n - i, &cp, &bad);
        if (!len) {
            cps[k++] = 0xFFFD;
            i += bad;
        } else {
            cps[k++] = cp;
            i += len;
        }
    }
    size_t a = 0, z = k;
    while (a < z && py_space(cps[a])) a++;
    while (z > a && py_space(cps[z - 1])) z--;
    if (z - a > 500)
        z = a + 500;
    buf m = {0};
    char head[96];
    snprintf(head, sizeof head, "the Corral controller answered HTTP %d: ", status);
    buf_str(&m, head);
    for (size_t j = a; j < z; j++) {
        uint32_t c = cps[j];
        char t[4];
        size_t l;
        if (c < 0x80) { t[0] = (char)c; l = 1; }
        else if (c < 0x800) { t[0] = (char)(0xC0 | (c >> 6)); t[1] = (char)(0x80 | (c & 0x3F)); l = 2; }
        else if (c < 0x10000) {
            t[0] = (char)(0xE0 | (c >> 12)); t[1] = (char)(0x80 | ((c >> 6) & 0x3F));
            t[2] = (char)(0x80 | (c & 0x3F)); l = 3;
        } else {
            t[0] = (char)(0xF0 | (c >> 18)); t[1] = (char)(0x80 | ((c >> 12) & 0x3F));
            t[2] = (char)(0x80 | ((c >> 6) & 0x3F)); t[3] = (char)(0x80 | (c & 0x3F)); l = 4;
        }
        buf_add(&m, t, l);
    }
    buf_add(&m, "\0", 1);
    die_msg(m.p);
}

static int file_known(const char *p, size_t n) {
    for (size_t i = 0; i < g_nfiles; i++)
        if (g_files[i].path_len == n && !memcmp(g_files[i].path, p, n))
            return 1;
    return 0;
}

#include "launcher_srun.c" /* srun's step relay: same translation unit */

int main(int argc, char **argv) {
    g_argc = argc;
    g_argv = argv;
    for (size_t i = 0; i < CMD_MAX; i++)
        g_cmd[i] = CMD_SLOT[CMD_OFFSET + i];
    g_cmd[CMD_MAX] = 0;
    if (!g_cmd[0]) { /* an unpatched build: the command is the program's name */
        const char *slash = argv[0] ? strrchr(argv[0], '/') : NULL;
        const char *name = slash ? slash + 1 : argv[0] ? argv[0] : "corral-shim";
        snprintf(g_cmd, sizeof g_cmd, "%s", name);
    }
    if (!strcmp(g_cmd, "salloc") || env_nonempty("CORRAL_SHIM_LOCAL"))
        exec_python();
    if (!strcmp(g_cmd, "srun"))
        srun_setup(); /* inside an allocation; else it execs the Python srun */
    if (!strcmp(g_cmd, "sbatch")) /* --wait: the answer comes when the job ends, later than
                                     TIMEOUT_S; lean.py waits without a read timeout */
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "--wait") || !strcmp(argv[i], "-W"))
                exec_python();
    if (!strcmp(g_cmd, "squeue")) /* squeue -i N / --iterate: a loop, run by the Python shim */
        for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
            if (!strncmp(argv[i], "--iter", 6) || (argv[i][0] == '-' && argv[i][1] == 'i'))
                exec_python();
    if (!strcmp(g_cmd, "scontrol") || !strcmp(g_cmd, "scancel") || !strcmp(g_cmd, "qdel"))
        signal(SIGTERM, SIG_IGN); /* finish the call when the caller's job gets signalled */

    /* os.getcwd(), else $PWD, else "/" */
    for (size_t cap = 4096; cap <= (1u << 20); cap *= 2) {
        char *p = malloc(cap);
        if (!p)
            die_msg("out of memory");
        if (getcwd(p, cap)) {
            g_cwd = p;
            break;
        }
        free(p);
        if (errno != ERANGE)
            break;
    }
    if (!g_cwd) {
        const char *pwd = env_nonempty("PWD");
        g_cwd = xstrdup(pwd ? pwd : "/");
    }

    buf body = {0}, reply = {0};
    int limited = 0;
    for (int round = 0; round < MAX_ROUNDS; round++) {
        body.n = 0;
        build_body(&body);
        if (http_exchange(API_PATH, &body, &reply) < 0)
            exec_python(); /* not reachable: Python says so in lean.py's words */
        char *pl;
        size_t pn;
        int status = parse_http(&reply, &pl, &pn);
        if (status == 404)
            exec_python(); /* an older controller: the Python shim runs it locally */
        if (status == 503)
            exec_python(); /* a standby (nothing done): the Python shim finds the leader */
        if (status == 429) { /* the user's rate limit: wait and ask again, as Slurm's client */
            limited++;
            sleep(limited < 10 ? limited : 10);
            round--;
            continue;
        }
        if (status != 200)
            die_http(status, pl, pn);
        if (g_step_io && pn >= 6 && !memcmp(pl, "CRSR1 ", 6)) {
            if (pn >= 12 && !memcmp(pl, "CRSR1 python", 12))
                exec_python(); /* nothing was done: the Python srun runs the step */
            srun_relay(pl, pn);
        }
        /* CRSH1 <rc> <len out> <len err> <len need>\n */
        const char *nl = memchr(pl, '\n', pn);
        if (!nl)
            die_msg("malformed reply from the controller");
        const char *f[5], *fe[5];
        const char *c = pl;
        int nf = 0;
        while (c < nl && nf <= 5) {
            while (c < nl && (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\v' || *c == '\f'))
                c++;
            if (c >= nl)
                break;
            if (nf == 5) {
                nf = 6;
                break;
            }
            f[nf] = c;
            while (c < nl && !(*c == ' ' || *c == '\t' || *c == '\r' || *c == '\v' || *c == '\f'))
                c++;
            fe[nf++] = c;
        }
        size_t rc_abs, lo, le, ln;
        int rc_neg;
        if (nf != 5 || fe[0] - f[0] != 5 || memcmp(f[0], "CRSH1", 5) ||
            (rc_neg = parse_len(f[1], fe[1], &rc_abs, 1)) < 0 ||
            parse_len(f[2], fe[2], &lo, 0) < 0 || parse_len(f[3], fe[3], &le, 0) < 0 ||
            parse_len(f[4], fe[4], &ln, 0) < 0)
            die_msg("malformed reply from the controller");
        const char *rest = nl + 1;
        size_t rn = pn - (size_t)(rest - pl);
        /* Python slices: lengths past the end are cut at the end */
        size_t o1 = lo < rn ? lo : rn;
        size_t e1 = le < rn - o1 ? le : rn - o1;
        size_t n1 = ln < rn - o1 - e1 ? ln : rn - o1 - e1;
        if (n1 == 0 || ln == 0) {
            write_all(1, rest, o1);
            write_all(2, rest + o1, e1);
            unsigned rc = (unsigned)(rc_abs & 0xFF);
            exit((int)(rc_neg ? (256 - rc) & 0xFF : rc));
        }
        const char *np = rest + o1 + e1, *nend = np + n1;
        while (np <= nend) {
            const char *z = memchr(np, '\0', (size_t)(nend - np));
            if (!z)
                z = nend;
            size_t plen = (size_t)(z - np);
            if (plen == 1 && np[0] == '-') {
                read_stdin();
            } else if (!file_known(np, plen)) {
                if (g_nfiles >= MAX_FILES)
                    die_msg("the Corral controller asked for too many files");
                file_entry *fe2 = &g_files[g_nfiles++];
                fe2->path = malloc(plen + 1);
                if (!fe2->path)
                    die_msg("out of memory");
                memcpy(fe2->path, np, plen);
                fe2->path[plen] = 0;
                fe2->path_len = plen;
                read_file_entry(fe2);
            }
            np = z + 1;
        }
    }
    die_msg("the Corral controller kept asking for input files");
    return 1;
}
