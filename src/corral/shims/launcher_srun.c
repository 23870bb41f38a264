/* srun inside an allocation, compiled: the step's I/O relay (included by launcher.c).
 *
 * The controller plans and starts the step (corral/shims/srun_fast.py); this program
 * only listens for the step's nodes and moves bytes, as corral/shims/steplaunch.py's
 * RemoteStep does in Python, with the same frames (corral/protocol/step.py), the same
 * messages and the same exit status:
 *
 * 1. srun_setup: a TCP listener on every address (the nodes connect to the address
 *    advertised: CORRAL_SRUN_ADDR, CORRAL_NODE_ADDR, else the local address of the route
 *    to an http:// controller, else 127.0.0.1) and a 128-bit key from getrandom. The
 *    shim request then carries "step_io": {"addr", "key", "pid"}.
 * 2. The controller answers "CRSR1 python" (nothing done: exec the Python srun), a plain
 *    CRSH1 frame (help, errors: printed as any shim's), or "CRSR1 step ..." with the
 *    step's layout: srun_relay takes over and never returns.
 * 3. srun_relay: accept one connection per node (its first frame a HELLO carrying the
 *    key; anything else is dropped), relay task output (-l labels whole lines), stdin
 *    (once every node is there), signals (SIGINT twice within a second kills the step),
 *    collect exit codes, then report the step's end to the controller and exit with the
 *    highest task exit code (128+N for a task killed by signal N).
 *
 * Every length read from the network is checked (4 MiB per frame, as the Python side);
 * nothing from a node that has not proven the key is acted on.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <time.h>

#define FR_HELLO 1
#define FR_STDOUT 2
#define FR_STDERR 3
#define FR_EXIT 4
#define FR_DONE 5
#define FR_FAILED 6
#define FR_STDIN 10
#define FR_STDIN_EOF 11
#define FR_SIGNAL 12
#define FR_ALL_TASKS 0xFFFFFFFFu
#define FR_HEADER 9
#define FR_MAX_PAYLOAD ((size_t)4 << 20)
#define STEP_MAX_NODES 65536
#define STEP_MAX_TASKS (1 << 20)
#define HELLO_TIMEOUT_S 5.0
#define MAX_PENDING 256
#define LINE_CAP ((size_t)1 << 20) /* a labelled line longer than this is cut */

static int g_step_io;          /* this request carries step_io */
static int g_lfd = -1;         /* the step's listener */
static char g_io_addr[80];
static char g_io_key[33];
static int g_sigpipe[2] = {-1, -1};

/* ---- set-up -------------------------------------------------------------------------- */
static int digits_only(const char *s) {
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* The address the nodes reach this srun at (steplaunch.advertised_address), IPv4 only:
 * anything else is left to the Python srun. */
static void advertised_host(char *out, size_t cap) {
    const char *h = env_nonempty("CORRAL_SRUN_ADDR");
    if (!h)
        h = env_nonempty("CORRAL_NODE_ADDR");
    if (h) {
        snprintf(out, cap, "%s", h);
        return;
    }
    snprintf(out, cap, "127.0.0.1");
    const char *url = getenv("CORRAL_URL");
    if (!url || strncmp(url, "http://", 7))
        return;
    const char *a = url + 7;
    size_t n = strcspn(a, "/?#");
    char host[256];
    if (n >= sizeof host)
        return;
    memcpy(host, a, n);
    host[n] = 0;
    char *at = strrchr(host, '@');
    char *name = at ? at + 1 : host;
    if (name[0] == '[')
        exec_python(); /* IPv6: the Python srun */
    char *colon = strchr(name, ':');
    if (colon)
        *colon = 0;
    if (!*name)
        return;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    if (getaddrinfo(name, "9", &hints, &res) != 0 || !res)
        return;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct sockaddr_in me;
        socklen_t ml = sizeof me;
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&me, &ml) == 0)
            inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)cap);
        close(fd);
    }
    freeaddrinfo(res);
}

static void srun_setup(void) {
    if (!digits_only(getenv("SLURM_JOB_ID")))
        exec_python(); /* outside an allocation: the Python srun allocates first */
    const char *forced = getenv("CORRAL_SRUN_LAUNCH");
    if (forced && !strcmp(forced, "local"))
        exec_python();
    char host[64];
    advertised_host(host, sizeof host);
    struct in_addr probe;
    if (inet_pton(AF_INET, host, &probe) != 1)
        exec_python(); /* a host name or IPv6: the Python srun */
    g_lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (g_lfd < 0)
        exec_python();
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t sl = sizeof sa;
    if (bind(g_lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(g_lfd, 128) != 0 ||
        getsockname(g_lfd, (struct sockaddr *)&sa, &sl) != 0)
        exec_python();
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t r = getrandom(raw + got, sizeof raw - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            exec_python();
        }
        got += (size_t)r;
    }
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(g_io_key + 2 * i, 3, "%02x", raw[i]);
    snprintf(g_io_addr, sizeof g_io_addr, "%s:%u", host, (unsigned)ntohs(sa.sin_port));
    g_step_io = 1;
}

static void step_io_json(buf *b) {
    char t[200];
    snprintf(t, sizeof t, ",\"step_io\":{\"addr\":\"%s\",\"key\":\"%s\",\"pid\":%ld}",
             g_io_addr, g_io_key, (long)getpid());
    buf_str(b, t);
}

/* ---- the step ------------------------------------------------------------------------ */
typedef struct {
    char *name;
    int *tasks;
    size_t ntasks;
    int fd; /* -1 until its HELLO arrived */
    int done;
    buf in;
    char *usage; /* the DONE payload (JSON object) */
    size_t usage_len;
} step_node;

typedef struct {
    int fd;
    double t0;
    buf in;
} pending_conn;

static struct {
    char job[32];
    char step[16];
    size_t ntasks, nnodes, nconnected;
    int label, kill_on_bad_exit, killed, kill_sig;
    long stdin_task; /* -1 none, -2 all, else a task */
    int width;
    step_node *nodes;
    int *task_node;
    int *have, *code, *sig;
    buf *lines; /* 2 per task: stdout, stderr (-l only) */
} S;

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    write_all(2, line, (size_t)n);
}

static void frame_send(step_node *nd, unsigned kind, uint32_t task, const char *p, size_t n) {
    if (nd->fd < 0 || nd->done)
        return;
    unsigned char h[FR_HEADER];
    h[0] = (unsigned char)kind;
    h[1] = (unsigned char)(task >> 24); h[2] = (unsigned char)(task >> 16);
    h[3] = (unsigned char)(task >> 8); h[4] = (unsigned char)task;
    uint32_t l = (uint32_t)n;
    h[5] = (unsigned char)(l >> 24); h[6] = (unsigned char)(l >> 16);
    h[7] = (unsigned char)(l >> 8); h[8] = (unsigned char)l;
    if (send_all(nd->fd, (const char *)h, sizeof h) == 0 && n)
        send_all(nd->fd, p, n);
}

static void signal_all(int sig) {
    /* a step being ended is ended on nodes that connect later too */
    if ((sig == SIGKILL || sig == SIGTERM || sig == SIGHUP) && S.kill_sig != SIGKILL)
        S.kill_sig = sig;
    char num[16];
    int n = snprintf(num, sizeof num, "%d", sig);
    for (size_t i = 0; i < S.nnodes; i++)
        frame_send(&S.nodes[i], FR_SIGNAL, FR_ALL_TASKS, num, (size_t)n);
}

/* corral.core.parse.arrayspec.format_array of the tasks with want(t) */
static void task_ranges(buf *out, int (*want)(size_t)) {
    int first = 1;
    for (size_t t = 0; t < S.ntasks;) {
        if (!want(t)) {
            t++;
            continue;
        }
        size_t e = t;
        while (e + 1 < S.ntasks && want(e + 1))
            e++;
        char r[48];
        if (e == t)
            snprintf(r, sizeof r, "%s%zu", first ? "" : ",", t);
        else
            snprintf(r, sizeof r, "%s%zu-%zu", first ? "" : ",", t, e);
        buf_str(out, r);
        first = 0;
        t = e + 1;
    }
    buf_add(out, "", 1);
}

static int task_running(size_t t) { return !S.have[t]; }
static int task_exited(size_t t) { return S.have[t]; }

static void interrupt_status(void) {
    say("srun: interrupt (one more within 1 sec to abort)");
    buf r = {0};
    task_ranges(&r, task_running);
    if (r.p[0])
        say("srun: StepId=%s.%s tasks %s: running", S.job, S.step, r.p);
    r.n = 0;
    task_ranges(&r, task_exited);
    if (r.p[0])
        say("srun: StepId=%s.%s tasks %s: exited", S.job, S.step, r.p);
    free(r.p);
}

/* An integer member of a flat JSON object written by json.dumps (the stepd's frames). */
static long json_int(const char *p, size_t n, const char *key, long dflt) {
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *k = memfind(p, n, pat, (size_t)pl);
    if (!k)
        return dflt;
    const char *c = k + pl, *e = p + n;
    while (c < e && (*c == ' ' || *c == ':'))
        c++;
    int neg = 0;
    if (c < e && *c == '-') {
        neg = 1;
        c++;
    }
    if (c >= e || *c < '0' || *c > '9')
        return dflt;
    long v = 0;
    while (c < e && *c >= '0' && *c <= '9' && v < 100000000)
        v = v * 10 + (*c++ - '0');
    return neg ? -v : v;
}

/* A string member without escapes, copied into out; 0 when absent or escaped. */
static int json_str(const char *p, size_t n, const char *key, char *out, size_t cap) {
    char pat[64];
    int pl = snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *k = memfind(p, n, pat, (size_t)pl);
    if (!k)
        return 0;
    const char *c = k + pl, *e = p + n;
    while (c < e && (*c == ' ' || *c == ':'))
        c++;
    if (c >= e || *c != '"')
        return 0;
    const char *s = ++c;
    while (c < e && *c != '"' && *c != '\\')
        c++;
    if (c >= e || *c != '"' || (size_t)(c - s) >= cap)
        return 0;
    memcpy(out, s, (size_t)(c - s));
    out[c - s] = 0;
    return 1;
}

static int keys_equal(const char *a, const char *b) {
    /* constant time over the key's length */
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static void lost(step_node *nd) {
    buf ids = {0};
    for (size_t i = 0; i < nd->ntasks; i++) {
        int t = nd->tasks[i];
        if (S.have[t])
            continue;
        char num[16];
        snprintf(num, sizeof num, "%s%d", ids.n ? "," : "", t);
        buf_str(&ids, num);
        S.have[t] = 1;
        S.code[t] = 0;
        S.sig[t] = SIGKILL;
    }
    if (ids.n) {
        buf_add(&ids, "", 1);
        say("srun: error: %s: lost the connection to the step's tasks %s (node failure or "
            "job ended)", nd->name, ids.p);
    }
    free(ids.p);
}

static void close_node(step_node *nd) {
    if (nd->fd >= 0)
        close(nd->fd);
    nd->fd = -2; /* connected once, now gone */
    if (!nd->done) {
        nd->done = 1;
        lost(nd);
    }
}

static void out_bytes(unsigned kind, uint32_t task, const char *p, size_t n) {
    int fd = kind == FR_STDOUT ? 1 : 2;
    if (!S.label || task >= S.ntasks) {
        if (!S.label)
            write_all(fd, p, n);
        return;
    }
    buf *line = &S.lines[2 * task + (kind == FR_STDERR)];
    char prefix[32];
    int pl = snprintf(prefix, sizeof prefix, "%*u: ", S.width, (unsigned)task);
    buf outb = {0};
    const char *c = p, *e = p + n;
    while (c < e) {
        const char *nl = memchr(c, '\n', (size_t)(e - c));
        if (!nl) {
            size_t room = LINE_CAP > line->n ? LINE_CAP - line->n : 0;
            size_t take = (size_t)(e - c) < room ? (size_t)(e - c) : room;
            if (take)
                buf_add(line, c, take);
            break;
        }
        buf_add(&outb, prefix, (size_t)pl);
        if (line->n) {
            buf_add(&outb, line->p, line->n);
            line->n = 0;
        }
        buf_add(&outb, c, (size_t)(nl - c) + 1);
        c = nl + 1;
    }
    if (outb.n)
        write_all(fd, outb.p, outb.n);
    free(outb.p);
}

/* One frame from a node; returns 1 when it reports a failed task. */
static int on_frame(step_node *nd, unsigned kind, uint32_t task, const char *p, size_t n) {
    if (kind == FR_STDOUT || kind == FR_STDERR) {
        out_bytes(kind, task, p, n);
    } else if (kind == FR_EXIT) {
        if (task >= S.ntasks)
            return 0;
        long code = json_int(p, n, "exit_code", 0), sig = json_int(p, n, "signal", 0);
        S.have[task] = 1;
        S.code[task] = (int)(code & 0xFF);
        S.sig[task] = (int)(sig & 0x7F);
        return code != 0 || sig != 0;
    } else if (kind == FR_FAILED) {
        say("srun: error: %.*s", (int)(n > 2000 ? 2000 : n), p);
        if (task < S.ntasks) {
            S.have[task] = 1;
            S.code[task] = 2;
            S.sig[task] = 0;
        }
        return 1;
    } else if (kind == FR_DONE) {
        nd->done = 1;
        free(nd->usage);
        nd->usage = NULL;
        nd->usage_len = 0;
        if (n >= 2 && p[0] == '{' && p[n - 1] == '}' && !memchr(p, '\n', n)) {
            nd->usage = malloc(n);
            if (nd->usage) {
                memcpy(nd->usage, p, n);
                nd->usage_len = n;
            }
        }
    }
    return 0;
}

/* Decode what a node sent so far; 0, or -1 when it broke the protocol. */
static int node_frames(step_node *nd) {
    size_t off = 0;
    while (nd->in.n - off >= FR_HEADER) {
        const unsigned char *h = (const unsigned char *)nd->in.p + off;
        uint32_t task = ((uint32_t)h[1] << 24) | ((uint32_t)h[2] << 16) |
                        ((uint32_t)h[3] << 8) | h[4];
        size_t len = ((size_t)h[5] << 24) | ((size_t)h[6] << 16) | ((size_t)h[7] << 8) | h[8];
        if (len > FR_MAX_PAYLOAD)
            return -1;
        if (nd->in.n - off - FR_HEADER < len)
            break;
        int bad = on_frame(nd, h[0], task, nd->in.p + off + FR_HEADER, len);
        off += FR_HEADER + len;
        if (bad && S.kill_on_bad_exit && !S.killed) {
            say("srun: error: task %u on %s failed: terminating StepId=%s.%s "
                "(--kill-on-bad-exit)", (unsigned)task, nd->name, S.job, S.step);
            signal_all(SIGKILL);
            S.killed = 1;
        }
        if (nd->fd < 0)
            break;
    }
    if (off) {
        memmove(nd->in.p, nd->in.p + off, nd->in.n - off);
        nd->in.n -= off;
    }
    return 0;
}

static int recv_some(int fd, buf *b) {
    buf_grow(b, 65536, FR_MAX_PAYLOAD + FR_HEADER + 65536);
    for (;;) {
        ssize_t r = recv(fd, b->p + b->n, 65536, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b->n += (size_t)r;
        return 0;
    }
}

/* A pending connection's first frame: the node it belongs to, or NULL (drop it). */
static step_node *hello(pending_conn *pc) {
    if (pc->in.n < FR_HEADER)
        return NULL;
    const unsigned char *h = (const unsigned char *)pc->in.p;
    size_t len = ((size_t)h[5] << 24) | ((size_t)h[6] << 16) | ((size_t)h[7] << 8) | h[8];
    if (h[0] != FR_HELLO || len > 65536 || pc->in.n < FR_HEADER + len)
        return NULL;
    char key[80], name[256];
    const char *p = pc->in.p + FR_HEADER;
    if (!json_str(p, len, "key", key, sizeof key) || !keys_equal(key, g_io_key) ||
        !json_str(p, len, "node", name, sizeof name))
        return NULL;
    for (size_t i = 0; i < S.nnodes; i++)
        if (!strcmp(S.nodes[i].name, name))
            return S.nodes[i].fd == -1 ? &S.nodes[i] : NULL;
    return NULL;
}

static int hello_complete(const pending_conn *pc) {
    if (pc->in.n < FR_HEADER)
        return 0;
    const unsigned char *h = (const unsigned char *)pc->in.p;
    size_t len = ((size_t)h[5] << 24) | ((size_t)h[6] << 16) | ((size_t)h[7] << 8) | h[8];
    return h[0] != FR_HELLO || len > 65536 || pc->in.n >= FR_HEADER + len;
}

static void on_signal(int sig) {
    unsigned char c = (unsigned char)sig;
    ssize_t w = write(g_sigpipe[1], &c, 1);
    (void)w;
}

static void stdin_to_nodes(unsigned kind, const char *p, size_t n) {
    uint32_t task = S.stdin_task == -2 ? FR_ALL_TASKS : (uint32_t)S.stdin_task;
    for (size_t i = 0; i < S.nnodes; i++) {
        step_node *nd = &S.nodes[i];
        if (task != FR_ALL_TASKS) {
            int has = 0;
            for (size_t k = 0; k < nd->ntasks && !has; k++)
                has = (uint32_t)nd->tasks[k] == task;
            if (!has)
                continue;
        }
        frame_send(nd, kind, task, p, n);
    }
}

/* Parse "CRSR1 step ..." (srun_fast.reply) into S; exits with a message when malformed. */
static const char *parse_plan(const char *pl, size_t pn, size_t *errlen) {
    const char *nl = memchr(pl, '\n', pn);
    if (!nl || (size_t)(nl - pl) > 400)
        die_msg("malformed step reply from the controller");
    char head[401];
    memcpy(head, pl, (size_t)(nl - pl));
    head[nl - pl] = 0;
    char job[32], step[16];
    unsigned long ntasks, nnodes, elen;
    int label, kob;
    long stdin_task;
    if (sscanf(head, "CRSR1 step %31s %15s %lu %d %d %ld %lu %lu", job, step, &ntasks, &label,
               &kob, &stdin_task, &nnodes, &elen) != 8 || !digits_only(job) ||
        !digits_only(step) || ntasks < 1 || ntasks > STEP_MAX_TASKS || nnodes < 1 ||
        nnodes > STEP_MAX_NODES || stdin_task < -2 || stdin_task >= (long)ntasks)
        die_msg("malformed step reply from the controller");
    snprintf(S.job, sizeof S.job, "%s", job);
    snprintf(S.step, sizeof S.step, "%s", step);
    S.ntasks = ntasks;
    S.nnodes = nnodes;
    S.label = label != 0;
    S.kill_on_bad_exit = kob != 0;
    S.stdin_task = stdin_task;
    S.width = snprintf(NULL, 0, "%lu", ntasks - 1);
    S.nodes = calloc(nnodes, sizeof *S.nodes);
    S.task_node = calloc(ntasks, sizeof(int));
    S.have = calloc(ntasks, sizeof(int));
    S.code = calloc(ntasks, sizeof(int));
    S.sig = calloc(ntasks, sizeof(int));
    S.lines = S.label ? calloc(2 * ntasks, sizeof(buf)) : NULL;
    if (!S.nodes || !S.task_node || !S.have || !S.code || !S.sig || (S.label && !S.lines))
        die_msg("out of memory");
    for (size_t t = 0; t < ntasks; t++)
        S.task_node[t] = -1;
    const char *c = nl + 1, *end = pl + pn;
    for (size_t i = 0; i < nnodes; i++) {
        const char *le = memchr(c, '\n', (size_t)(end - c));
        const char *sp = le ? memchr(c, ' ', (size_t)(le - c)) : NULL;
        if (!le || !sp || sp == c)
            die_msg("malformed step reply from the controller");
        step_node *nd = &S.nodes[i];
        nd->name = strndup(c, (size_t)(sp - c));
        nd->fd = -1;
        nd->tasks = calloc(ntasks, sizeof(int));
        if (!nd->name || !nd->tasks)
            die_msg("out of memory");
        for (const char *q = sp + 1; q < le;) {
            char *qe;
            unsigned long t = strtoul(q, &qe, 10);
            if (qe == q || t >= ntasks || S.task_node[t] != -1 || nd->ntasks >= ntasks)
                die_msg("malformed step reply from the controller");
            S.task_node[t] = (int)i;
            nd->tasks[nd->ntasks++] = (int)t;
            q = qe;
            if (q < le && *q == ',')
                q++;
            else if (q < le)
                die_msg("malformed step reply from the controller");
        }
        c = le + 1;
    }
    *errlen = elen < (size_t)(end - c) ? elen : (size_t)(end - c);
    return c;
}

static void report_end(int rc) {
    int sig = rc > 128 ? rc - 128 : 0, code = sig ? 0 : rc;
    const char *state = rc == 0 ? "COMPLETED" : sig ? "CANCELLED" : "FAILED";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    buf b = {0};
    char t[256];
    snprintf(t, sizeof t, "{\"state\":\"%s\",\"exit_code\":%d,\"signal\":%d,\"end_time\":%ld.%06ld",
             state, code > 255 ? 255 : code, sig, (long)ts.tv_sec, ts.tv_nsec / 1000);
    buf_str(&b, t);
    int any = 0;
    for (size_t i = 0; i < S.nnodes; i++) {
        step_node *nd = &S.nodes[i];
        if (!nd->usage)
            continue;
        buf_str(&b, any ? "," : ",\"usage\":{\"nodes\":{");
        json_cstr(&b, nd->name);
        buf_add(&b, ":", 1);
        buf_add(&b, nd->usage, nd->usage_len);
        any = 1;
    }
    buf_str(&b, any ? "}}}" : "}");
    char path[128];
    snprintf(path, sizeof path, "/api/v1/jobs/%s/steps/%s/end", S.job, S.step);
    http_post_quiet(path, &b); /* informational: its answer is not needed */
    free(b.p);
}

static int report_codes(void) {
    int worst = 0;
    /* groups of (node, what) in the order of their first task */
    char **whats = calloc(S.ntasks, sizeof(char *));
    int *grp = calloc(S.ntasks, sizeof(int));
    if (!whats || !grp)
        die_msg("out of memory");
    for (size_t t = 0; t < S.ntasks; t++) {
        grp[t] = -1;
        if (!S.have[t] || (!S.code[t] && !S.sig[t]))
            continue;
        char w[96];
        if (S.sig[t]) {
            const char *s = strsignal(S.sig[t]);
            if (!s || strstr(s, "Unknown signal"))
                snprintf(w, sizeof w, "Signal %d", S.sig[t]);
            else
                snprintf(w, sizeof w, "%s", s);
            if (128 + S.sig[t] > worst)
                worst = 128 + S.sig[t];
        } else {
            snprintf(w, sizeof w, "Exited with exit code %d", S.code[t]);
            if (S.code[t] > worst)
                worst = S.code[t];
        }
        whats[t] = xstrdup(w);
        for (size_t u = 0; u < t && grp[t] < 0; u++)
            if (grp[u] == (int)u && S.task_node[u] == S.task_node[t] && !strcmp(whats[u], w))
                grp[t] = (int)u;
        if (grp[t] < 0)
            grp[t] = (int)t;
    }
    for (size_t g = 0; g < S.ntasks; g++) {
        if (grp[g] != (int)g)
            continue;
        size_t count = 0;
        buf r = {0};
        int first = 1;
        for (size_t t = g; t < S.ntasks;) {
            if (grp[t] != (int)g) {
                t++;
                continue;
            }
            size_t e = t;
            while (e + 1 < S.ntasks && grp[e + 1] == (int)g)
                e++;
            char part[48];
            if (e == t)
                snprintf(part, sizeof part, "%s%zu", first ? "" : ",", t);
            else
                snprintf(part, sizeof part, "%s%zu-%zu", first ? "" : ",", t, e);
            buf_str(&r, part);
            first = 0;
            count += e - t + 1;
            t = e + 1;
        }
        buf_add(&r, "", 1);
        int ni = S.task_node[g];
        say("srun: error: %s: %s %s: %s", ni >= 0 ? S.nodes[ni].name : "?",
            count == 1 ? "task" : "tasks", r.p, whats[g]);
        free(r.p);
    }
    for (size_t t = 0; t < S.ntasks; t++)
        free(whats[t]);
    free(whats);
    free(grp);
    return worst;
}

static void srun_relay(const char *pl, size_t pn) __attribute__((noreturn));
static void srun_relay(const char *pl, size_t pn) {
    size_t errlen;
    const char *err = parse_plan(pl, pn, &errlen);
    if (errlen)
        write_all(2, err, errlen);
    if (pipe2(g_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0)
        die_msg("cannot make a pipe");
    signal(SIGPIPE, SIG_IGN);
    static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
                                    SIGALRM, SIGCONT};
    for (size_t i = 0; i < sizeof forwarded / sizeof *forwarded; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(forwarded[i], &sa, NULL);
    }
    const char *cs = env_nonempty("CORRAL_STEP_CONNECT_S");
    double connect_s = cs ? strtod(cs, NULL) : 30.0;
    if (!(connect_s > 0))
        connect_s = 30.0;
    double deadline = mono_s() + connect_s, last_int = -10.0;
    int stdin_open = S.stdin_task != -1, failed = 0;
    pending_conn pend[MAX_PENDING];
    size_t npend = 0;
    struct pollfd *fds = calloc(S.nnodes + MAX_PENDING + 3, sizeof *fds);
    step_node **fd_node = calloc(S.nnodes + MAX_PENDING + 3, sizeof *fd_node);
    if (!fds || !fd_node)
        die_msg("out of memory");
    for (;;) {
        size_t ndone = 0;
        for (size_t i = 0; i < S.nnodes; i++)
            ndone += (size_t)S.nodes[i].done;
        if (S.nconnected == S.nnodes && ndone == S.nnodes)
            break;
        double now = mono_s();
        if (S.nconnected < S.nnodes && now > deadline) {
            failed = 1;
            break;
        }
        size_t nf = 0;
        fds[nf++] = (struct pollfd){g_lfd, POLLIN, 0};
        fds[nf++] = (struct pollfd){g_sigpipe[0], POLLIN, 0};
        int stdin_slot = -1;
        if (stdin_open && S.nconnected == S.nnodes) {
            stdin_slot = (int)nf;
            fds[nf++] = (struct pollfd){0, POLLIN, 0};
        }
        size_t pend0 = nf;
        for (size_t i = 0; i < npend; i++)
            fds[nf++] = (struct pollfd){pend[i].fd, POLLIN, 0};
        size_t node0 = nf;
        for (size_t i = 0; i < S.nnodes; i++)
            if (S.nodes[i].fd >= 0) {
                fd_node[nf] = &S.nodes[i];
                fds[nf++] = (struct pollfd){S.nodes[i].fd, POLLIN, 0};
            }
        int r = poll(fds, nf, 500);
        if (r < 0 && errno != EINTR)
            die_msg("poll failed");
        /* signals first: they may change what the nodes are told */
        unsigned char sigs[64];
        ssize_t ns = read(g_sigpipe[0], sigs, sizeof sigs);
        for (ssize_t i = 0; i < ns; i++) {
            int sg = sigs[i];
            if (sg == SIGINT) {
                double t = mono_s();
                if (t - last_int < 1.0) {
                    say("srun: sending Ctrl-C to StepId=%s.%s", S.job, S.step);
                    say("srun: forcing job termination");
                    signal_all(SIGKILL);
                    S.killed = 1;
                } else {
                    last_int = t;
                    interrupt_status();
                }
            } else {
                signal_all(sg);
                if (sg == SIGTERM || sg == SIGHUP)
                    S.killed = 1;
            }
        }
        if (r <= 0)
            goto expire;
        if (fds[0].revents & POLLIN) {
            int c = accept4(g_lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                if (npend < MAX_PENDING) {
                    pend[npend].fd = c;
                    pend[npend].t0 = mono_s();
                    pend[npend].in = (buf){0};
                    npend++;
                } else {
                    close(c);
                }
            }
        }
        if (stdin_slot >= 0 && fds[stdin_slot].revents) {
            char data[65536];
            ssize_t got = read(0, data, sizeof data);
            if (got < 0 && errno == EINTR)
                got = -2; /* retry on the next round */
            if (got > 0) {
                stdin_to_nodes(FR_STDIN, data, (size_t)got);
            } else if (got != -2) {
                stdin_to_nodes(FR_STDIN_EOF, NULL, 0);
                stdin_open = 0;
            }
        }
        for (size_t k = node0; k < nf; k++) {
            step_node *nd = fd_node[k];
            if (!fds[k].revents || nd->fd < 0)
                continue;
            if (recv_some(nd->fd, &nd->in) < 0 || node_frames(nd) < 0)
                close_node(nd);
        }
        /* pending connections: read their HELLO (pend[] compacts as they leave) */
        for (size_t k = pend0, i = 0; k < node0; k++) {
            pending_conn *pc = NULL;
            for (; i < npend; i++)
                if (pend[i].fd == fds[k].fd) {
                    pc = &pend[i];
                    break;
                }
            if (!pc || !fds[k].revents)
                continue;
            int gone = recv_some(pc->fd, &pc->in) < 0;
            if (!gone && !hello_complete(pc))
                continue;
            step_node *nd = gone ? NULL : hello(pc);
            if (!nd) {
                close(pc->fd);
                free(pc->in.p);
            } else {
                const unsigned char *h = (const unsigned char *)pc->in.p;
                size_t len = ((size_t)h[5] << 24) | ((size_t)h[6] << 16) |
                             ((size_t)h[7] << 8) | h[8];
                nd->fd = pc->fd;
                int one = 1;
                setsockopt(nd->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                nd->in = (buf){0};
                size_t rest = pc->in.n - FR_HEADER - len;
                if (rest)
                    buf_add(&nd->in, pc->in.p + FR_HEADER + len, rest);
                free(pc->in.p);
                S.nconnected++;
                if (S.kill_sig) {
                    char num[16];
                    int nn = snprintf(num, sizeof num, "%d", S.kill_sig);
                    frame_send(nd, FR_SIGNAL, FR_ALL_TASKS, num, (size_t)nn);
                }
                if (node_frames(nd) < 0)
                    close_node(nd);
            }
            pc->fd = -1;
        }
    expire:
        now = mono_s();
        size_t keep = 0;
        for (size_t i = 0; i < npend; i++) {
            if (pend[i].fd >= 0 && now - pend[i].t0 > HELLO_TIMEOUT_S) {
                close(pend[i].fd);
                free(pend[i].in.p);
                pend[i].fd = -1;
            }
            if (pend[i].fd >= 0)
                pend[keep++] = pend[i];
        }
        npend = keep;
    }
    for (size_t t = 0; S.label && t < S.ntasks; t++)
        for (int k = 0; k < 2; k++) {
            buf *line = &S.lines[2 * t + k];
            if (!line->n)
                continue;
            char prefix[32];
            int pl2 = snprintf(prefix, sizeof prefix, "%*zu: ", S.width, t);
            write_all(k ? 2 : 1, prefix, (size_t)pl2);
            write_all(k ? 2 : 1, line->p, line->n);
            write_all(k ? 2 : 1, "\n", 1);
        }
    int rc;
    if (failed) {
        buf miss = {0};
        for (size_t i = 0; i < S.nnodes; i++)
            if (S.nodes[i].fd == -1) {
                if (miss.n)
                    buf_add(&miss, ",", 1);
                buf_str(&miss, S.nodes[i].name);
            }
        buf_add(&miss, "", 1);
        say("srun: error: timeout waiting for node(s) %s to start step %s.%s", miss.p, S.job,
            S.step);
        signal_all(SIGKILL);
        rc = 1;
    } else {
        rc = report_codes();
    }
    for (size_t i = 0; i < S.nnodes; i++)
        if (S.nodes[i].fd >= 0)
            close(S.nodes[i].fd);
    close(g_lfd);
    report_end(rc);
    exit(rc);
}
