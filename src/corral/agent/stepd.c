/* Corral's compiled step process: one node's share of an srun step, without Python.
 *
 * Run as "corral-stepd serve [FIFO]", it is a job's step server on one node: the job's
 * supervisor (corral/agent/supervisor.py, corral/agent/stepbin.py's StepServer) spawns it
 * with the job's first step, puts it in the job's cgroup, and writes it one *plan* per
 * step on its stdin, each preceded by its length (4 bytes, big-endian); with FIFO it also
 * reads plans the node's agent writes there (corral/agent/stepfeed.py). A plan holds
 * everything stepd.py would compute — each task's environment, CPUs, files (stepbin.py
 * builds it). For each plan the server forks a step process (a fork of this small
 * program, not an exec of a new one: dynamic loading and CPU feature probing were most of
 * a step's CPU time on a virtual machine), which does what corral/agent/stepd.py's
 * StepProcess.run does, with the same frames (corral/protocol/step.py) and messages:
 *
 * 1. connect to srun's I/O address (numeric IPv4) and send the HELLO the plan carries;
 * 2. start each task: own process group, default signal dispositions, its CPUs and memory
 *    nodes (set_mempolicy), the job's user (groups, gid, uid of the plan, never anything
 *    srun sent), srun's working
 *    directory (/tmp with slurmstepd's message when missing), its stdin/stdout/stderr
 *    opened by the task itself after the user switch; SLURM_TASK_PID set; a PATH search
 *    as execvpe's (each task is a vfork: no copy of this process's memory before its exec);
 * 3. relay output to srun, srun's stdin and signals to the tasks, report each exit
 *    (EXIT) and, once all are gone and their output drained (at most 0.5 s after the last
 *    exit), the node's usage (DONE); srun's connection breaking kills the tasks.
 *
 * The plan is a sequence of netstrings ("<len>:<bytes>,"); a malformed plan ends its step
 * process with status 3 before anything runs. The server and its step processes ignore
 * the termination signals (they reach the tasks directly, as for the Python step
 * process); SIGKILL ends them. The server reaps its children and exits when its stdin
 * closes.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FR_HELLO 1
#define FR_STDOUT 2
#define FR_STDERR 3
#define FR_EXIT 4
#define FR_DONE 5
#define FR_FAILED 6
#define FR_STDIN 10
#define FR_STDIN_EOF 11
#define FR_SIGNAL 12
#define FR_ALL 0xFFFFFFFFu
#define FR_MAX ((size_t)4 << 20)
#define PLAN_MAX ((size_t)64 << 20)
#define MAX_TASKS 4096
#define DRAIN_AFTER_EXIT_S 0.5

typedef struct {
    unsigned gid;
    char *cpus, *mems, *in_mode, *in_path, *out_path, *err_mode, *err_path;
    int trunc;
    char **env;
    char **exec_env;  /* env with SLURM_TASK_PID, built before the task's vfork */
    char pidv[32];
    pid_t pid;
    int status, exited;
    int in_fd, out_fd, err_fd;
    double cpu_s;
    long rss_kb;
} task_t;

static char *g_plan;
static size_t g_plan_len, g_pos;
static int g_sock = -1, g_lost;
static int g_chld[2] = {-1, -1};

static void fail(const char *what) {
    dprintf(2, "corral-stepd: %s\n", what);
    _exit(3);
}

/* ---- the plan ----------------------------------------------------------------------- */
static char *field(size_t *len_out) {
    size_t n = 0, p = g_pos;
    while (p < g_plan_len && g_plan[p] >= '0' && g_plan[p] <= '9' && n < PLAN_MAX)
        n = n * 10 + (size_t)(g_plan[p++] - '0');
    if (p == g_pos || p >= g_plan_len || g_plan[p] != ':' || n > g_plan_len - p - 1 ||
        p + 1 + n >= g_plan_len || g_plan[p + 1 + n] != ',')
        fail("malformed plan");
    char *s = g_plan + p + 1;
    s[n] = 0; /* the ',' becomes the terminator */
    g_pos = p + 2 + n;
    if (len_out)
        *len_out = n;
    return s;
}

static long num_field(void) {
    char *s = field(NULL), *e;
    long v = strtol(s, &e, 10);
    if (!*s || *e)
        fail("malformed number in plan");
    return v;
}

static int read_full(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return got == 0 && r == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

/* ---- frames to srun ----------------------------------------------------------------- */
static void send_frame(unsigned kind, uint32_t task, const char *p, size_t n) {
    if (g_sock < 0 || g_lost)
        return;
    unsigned char h[9] = {(unsigned char)kind,
                          (unsigned char)(task >> 24), (unsigned char)(task >> 16),
                          (unsigned char)(task >> 8), (unsigned char)task,
                          (unsigned char)(n >> 24), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 8), (unsigned char)n};
    struct iovec iov[2] = {{h, sizeof h}, {(void *)p, n}};
    struct msghdr m = {0};
    m.msg_iov = iov;
    m.msg_iovlen = n ? 2 : 1;
    size_t left = sizeof h + n;
    while (left) {
        ssize_t w = sendmsg(g_sock, &m, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            g_lost = 1;
            return;
        }
        left -= (size_t)w;
        while (w > 0 && m.msg_iovlen) {
            if ((size_t)w >= m.msg_iov[0].iov_len) {
                w -= (ssize_t)m.msg_iov[0].iov_len;
                m.msg_iov++;
                m.msg_iovlen--;
            } else {
                m.msg_iov[0].iov_base = (char *)m.msg_iov[0].iov_base + w;
                m.msg_iov[0].iov_len -= (size_t)w;
                w = 0;
            }
        }
    }
}

/* ---- a task ------------------------------------------------------------------------- */
static void child_fail(const char *stage, int err) {
    dprintf(2, "slurmstepd: error: %s: %s\n", stage, strerror(err));
    _exit(err == ENOENT ? 2 : 1);
}

/* the task's memory policy (srun --mem-bind, membind.py): "b:0,1" binds its memory to
 * NUMA nodes 0 and 1 (MPOL_BIND), "p:0" prefers node 0 (MPOL_PREFERRED); inherited by
 * the exec and everything the task starts */
#define MEM_LONGS 16
static void bind_memory(const char *spec) {
    unsigned long mask[MEM_LONGS] = {0};
    int mode = spec[0] == 'p' ? 1 : 2;
    const char *c = spec + 2;
    while (*c) {
        char *end;
        long v = strtol(c, &end, 10);
        if (end == c)
            break;
        if (v >= 0 && v < MEM_LONGS * 64)
            mask[v / 64] |= 1UL << (v % 64);
        c = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            break;
    }
    if (syscall(SYS_set_mempolicy, mode, mask, (unsigned long)MEM_LONGS * 64 + 1) != 0)
        child_fail("memory binding", errno);
}

static int open_to(const char *path, int flags, int target) {
    int fd = open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (fd != target) {
        if (dup2(fd, target) < 0)
            return -1;
        close(fd);
    } else {
        fcntl(fd, F_SETFD, 0);
    }
    return 0;
}

static void exec_search(char **argv, char **env, const char *path);

/* a script without #!: /bin/sh runs it, as execvpe(3) does (argv on the child's stack) */
static void exec_sh(const char *file, char **argv, char **env) {
    size_t n = 0;
    while (argv[n])
        n++;
    if (n > 4096) {
        errno = E2BIG;
        return;
    }
    char *sh_argv[n + 2];
    sh_argv[0] = (char *)"/bin/sh";
    sh_argv[1] = (char *)file;
    for (size_t i = 1; i <= n; i++)
        sh_argv[i + 1] = argv[i];
    execve("/bin/sh", sh_argv, env);
}

static void exec_task(task_t *t, int switch_user, uid_t uid, gid_t gid, gid_t *groups,
                      size_t ngroups, const char *cwd, char **argv, int in_r, int out_w,
                      int err_w) {
    char stage[4200];
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);
    if (*t->cpus) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (char *c = t->cpus; *c;) {
            long v = strtol(c, &c, 10);
            if (v >= 0 && v < CPU_SETSIZE)
                CPU_SET((int)v, &set);
            if (*c == ',')
                c++;
            else if (*c)
                break;
        }
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            child_fail("cpu binding", errno);
    }
    if (*t->mems)
        bind_memory(t->mems);
    if (switch_user) {
        snprintf(stage, sizeof stage, "switching to uid %u", (unsigned)uid);
        if (setgroups(ngroups, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0)
            child_fail(stage, errno);
    }
    int note = 0, chdir_errno = 0;
    if (chdir(cwd) != 0) {
        chdir_errno = errno;
        note = 1;
        if (chdir("/tmp") != 0)
            child_fail("chdir /tmp", errno);
    }
    if (!strcmp(t->in_mode, "pipe")) {
        dup2(in_r, 0);
    } else if (!strcmp(t->in_mode, "file")) {
        snprintf(stage, sizeof stage, "cannot open input file %s", t->in_path);
        if (open_to(t->in_path, O_RDONLY, 0) != 0)
            child_fail(stage, errno);
    } else if (open_to("/dev/null", O_RDONLY, 0) != 0) {
        child_fail("/dev/null", errno);
    }
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | (t->trunc ? O_TRUNC : O_APPEND);
    if (*t->out_path) {
        snprintf(stage, sizeof stage, "cannot open output file %s", t->out_path);
        if (open_to(t->out_path, flags, 1) != 0)
            child_fail(stage, errno);
    } else {
        dup2(out_w, 1);
    }
    if (!strcmp(t->err_mode, "file")) {
        snprintf(stage, sizeof stage, "cannot open error file %s", t->err_path);
        if (open_to(t->err_path, (flags & ~O_TRUNC) | O_APPEND, 2) != 0)
            child_fail(stage, errno);
    } else if (!strcmp(t->err_mode, "pipe")) {
        dup2(err_w, 2);
    } else {
        dup2(1, 2);
    }
    if (note)
        dprintf(2, "slurmstepd: error: couldn't chdir to `%s': %s: going to /tmp instead\n",
                cwd, strerror(chdir_errno));
    /* the task shares our memory until it execs (vfork): nothing here allocates or
     * writes anything but its own slot (t->pidv, t->exec_env were made for it) */
    snprintf(t->pidv, sizeof t->pidv, "SLURM_TASK_PID=%ld", (long)getpid());
    snprintf(stage, sizeof stage, "execve(): %s", argv[0]);
    const char *path = NULL;
    for (size_t i = 0; t->exec_env[i]; i++)
        if (!strncmp(t->exec_env[i], "PATH=", 5))
            path = t->exec_env[i] + 5;
    exec_search(argv, t->exec_env, path);
    child_fail(stage, errno);
}

/* execvpe(3) over the task's own PATH (glibc's searches the caller's environment, which a
 * vfork child must not change): a name with a slash as is; else each PATH entry ("" is the
 * working directory; no PATH: /bin:/usr/bin), going on past ENOENT/ENOTDIR/EACCES-like
 * failures, a file the kernel cannot run (ENOEXEC) through /bin/sh; errno is EACCES if
 * any entry was not permitted, else the last failure. Returns only on failure. */
static void exec_search(char **argv, char **env, const char *path) {
    const char *name = argv[0];
    if (strchr(name, '/')) {
        execve(name, argv, env);
        if (errno == ENOEXEC)
            exec_sh(name, argv, env);
        return;
    }
    if (!path)
        path = "/bin:/usr/bin";
    size_t nlen = strlen(name);
    int denied = 0, last = ENOENT;
    char buf[4096 + 256];
    for (const char *p = path;; p++) {
        const char *end = strchrnul(p, ':');
        size_t dlen = (size_t)(end - p);
        if (dlen + nlen + 2 <= sizeof buf) {
            if (dlen) {
                memcpy(buf, p, dlen);
                buf[dlen] = '/';
                memcpy(buf + dlen + 1, name, nlen + 1);
            } else {
                memcpy(buf, name, nlen + 1);
            }
            execve(buf, argv, env);
            int e = errno;
            if (e == ENOEXEC) {
                exec_sh(buf, argv, env);
                return;
            }
            if (e == EACCES)
                denied = 1;
            else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ENODEV &&
                     e != ETIMEDOUT && e != ELOOP && e != ENAMETOOLONG) {
                return;
            }
            last = e;
        }
        if (!*end)
            break;
        p = end;
    }
    errno = denied ? EACCES : last;
}

static void on_chld(int s) {
    (void)s;
    int e = errno;
    ssize_t w = write(g_chld[1], "c", 1);
    (void)w;
    errno = e;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* SIGCHLD to handler (restarting, not for stops), every signal unblocked */
static void catch_children(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* ---- one step: the plan in g_plan ---------------------------------------------------- */
static int run_plan(void) {
    char *io_addr = field(NULL);
    size_t hello_len;
    char *hello = field(&hello_len);
    char *node = field(NULL);
    int switch_user = (int)num_field();
    uid_t uid = (uid_t)num_field();
    gid_t gid = (gid_t)num_field();
    char *groups_s = field(NULL);
    char *cwd = field(NULL);
    long argc = num_field();
    if (argc < 1 || argc > 65536)
        fail("bad argc");
    char **argv = calloc((size_t)argc + 1, sizeof(char *));
    if (!argv)
        fail("out of memory");
    for (long i = 0; i < argc; i++)
        argv[i] = field(NULL);
    long ntasks = num_field();
    if (ntasks < 1 || ntasks > MAX_TASKS)
        fail("bad task count");
    task_t *tasks = calloc((size_t)ntasks, sizeof *tasks);
    if (!tasks)
        fail("out of memory");
    for (long i = 0; i < ntasks; i++) {
        task_t *t = &tasks[i];
        t->gid = (unsigned)num_field();
        t->cpus = field(NULL);
        t->mems = field(NULL);
        t->in_mode = field(NULL);
        t->in_path = field(NULL);
        t->out_path = field(NULL);
        t->err_mode = field(NULL);
        t->err_path = field(NULL);
        t->trunc = (int)num_field();
        long ne = num_field();
        if (ne < 0 || ne > 65536)
            fail("bad environment size");
        t->env = calloc((size_t)ne + 1, sizeof(char *));
        if (!t->env)
            fail("out of memory");
        for (long k = 0; k < ne; k++)
            t->env[k] = field(NULL);
        t->in_fd = t->out_fd = t->err_fd = -1;
    }
    if (g_pos != g_plan_len)
        fail("trailing bytes in plan");
    static gid_t groups[65536];
    size_t ngroups = 0;
    for (char *c = groups_s; *c && ngroups < sizeof groups / sizeof *groups;) {
        groups[ngroups++] = (gid_t)strtoul(c, &c, 10);
        if (*c == ',')
            c++;
        else
            break;
    }

    /* termination signals are for the tasks; SIGCHLD wakes the loop */
    static const int ignored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
                                  SIGPIPE, SIGALRM};
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
        signal(ignored[i], SIG_IGN);
    if (pipe2(g_chld, O_CLOEXEC | O_NONBLOCK) != 0)
        fail("pipe");
    catch_children(on_chld);

    /* connect */
    char host[64];
    const char *colon = strrchr(io_addr, ':');
    if (!colon || (size_t)(colon - io_addr) >= sizeof host)
        fail("bad I/O address");
    memcpy(host, io_addr, (size_t)(colon - io_addr));
    host[colon - io_addr] = 0;
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
        fail("bad I/O address");
    g_sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {10, 0};
    setsockopt(g_sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (g_sock < 0 || connect(g_sock, (struct sockaddr *)&sin, sizeof sin) != 0) {
        dprintf(2, "corral-stepd: cannot connect to srun at %s: %s\n", io_addr, strerror(errno));
        _exit(1);
    }
    int one = 1;
    setsockopt(g_sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    send_frame(FR_HELLO, 0, hello, hello_len);

    /* start the tasks */
    for (long i = 0; i < ntasks; i++) {
        task_t *t = &tasks[i];
        int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
        int ok = 1;
        if (!strcmp(t->in_mode, "pipe"))
            ok = ok && pipe2(in_p, O_CLOEXEC) == 0;
        if (!*t->out_path)
            ok = ok && pipe2(out_p, O_CLOEXEC) == 0;
        if (!strcmp(t->err_mode, "pipe"))
            ok = ok && pipe2(err_p, O_CLOEXEC) == 0;
        if (ok) { /* the task's environment, SLURM_TASK_PID's slot filled by the task */
            size_t ne = 0;
            while (t->env[ne])
                ne++;
            t->exec_env = calloc(ne + 2, sizeof(char *));
            ok = t->exec_env != NULL;
            if (ok) {
                size_t k = 0;
                for (size_t i = 0; i < ne; i++)
                    if (strncmp(t->env[i], "SLURM_TASK_PID=", 15))
                        t->exec_env[k++] = t->env[i];
                t->exec_env[k++] = t->pidv;
                t->exec_env[k] = NULL;
            }
        }
        pid_t pid = ok ? vfork() : -1;
        if (pid == 0)
            exec_task(t, switch_user, uid, gid, groups, ngroups, cwd, argv, in_p[0], out_p[1],
                      err_p[1]);
        if (pid < 0) {
            char msg[512];
            int n = snprintf(msg, sizeof msg, "%s: task %u: [Errno %d] %s", node, t->gid,
                             errno, strerror(errno));
            send_frame(FR_FAILED, t->gid, msg, (size_t)n);
            t->exited = 1;
            t->status = 1 << 8;
        }
        t->pid = pid > 0 ? pid : 0;
        if (in_p[0] >= 0) close(in_p[0]);
        if (out_p[1] >= 0) close(out_p[1]);
        if (err_p[1] >= 0) close(err_p[1]);
        t->in_fd = in_p[1];
        t->out_fd = out_p[0];
        t->err_fd = err_p[0];
        if (pid < 0) {
            if (t->in_fd >= 0) { close(t->in_fd); t->in_fd = -1; }
            if (t->out_fd >= 0) { close(t->out_fd); t->out_fd = -1; }
            if (t->err_fd >= 0) { close(t->err_fd); t->err_fd = -1; }
        }
    }

    /* relay */
    struct pollfd *fds = calloc((size_t)ntasks * 2 + 2, sizeof *fds);
    int *fd_task = calloc((size_t)ntasks * 2 + 2, sizeof(int));
    int *fd_kind = calloc((size_t)ntasks * 2 + 2, sizeof(int));
    char *in = malloc(FR_MAX + 9 + 65536);
    size_t in_n = 0;
    char *chunk = malloc(65536);
    if (!fds || !fd_task || !fd_kind || !in || !chunk)
        fail("out of memory");
    double last_exit = 0;
    int sock_open = 1;
    for (;;) {
        /* reap */
        for (;;) {
            int st;
            struct rusage ru;
            pid_t p = wait4(-1, &st, WNOHANG, &ru);
            if (p <= 0)
                break;
            for (long i = 0; i < ntasks; i++) {
                task_t *t = &tasks[i];
                if (t->pid != p || t->exited)
                    continue;
                t->exited = 1;
                t->status = st;
                t->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
                           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
                t->rss_kb = ru.ru_maxrss;
                last_exit = mono();
                int code = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
                int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
                char msg[64];
                int n = snprintf(msg, sizeof msg, "{\"exit_code\":%d,\"signal\":%d}", code, sig);
                send_frame(FR_EXIT, t->gid, msg, (size_t)n);
                if (t->in_fd >= 0) {
                    close(t->in_fd);
                    t->in_fd = -1;
                }
            }
        }
        int alive = 0, open_fds = 0;
        for (long i = 0; i < ntasks; i++) {
            alive += !tasks[i].exited;
            open_fds += (tasks[i].out_fd >= 0) + (tasks[i].err_fd >= 0);
        }
        if (!alive && (!open_fds || mono() - last_exit > DRAIN_AFTER_EXIT_S))
            break;
        size_t nf = 0;
        fds[nf] = (struct pollfd){g_chld[0], POLLIN, 0};
        fd_task[nf++] = -1;
        int sock_slot = -1;
        if (sock_open) {
            sock_slot = (int)nf;
            fds[nf] = (struct pollfd){g_sock, POLLIN, 0};
            fd_task[nf++] = -1;
        }
        for (long i = 0; i < ntasks; i++) {
            if (tasks[i].out_fd >= 0) {
                fd_task[nf] = (int)i;
                fd_kind[nf] = FR_STDOUT;
                fds[nf++] = (struct pollfd){tasks[i].out_fd, POLLIN, 0};
            }
            if (tasks[i].err_fd >= 0) {
                fd_task[nf] = (int)i;
                fd_kind[nf] = FR_STDERR;
                fds[nf++] = (struct pollfd){tasks[i].err_fd, POLLIN, 0};
            }
        }
        int r = poll(fds, nf, alive ? 1000 : 100);
        if (r < 0 && errno != EINTR)
            fail("poll");
        if (r <= 0)
            continue;
        if (fds[0].revents) {
            char b[64];
            while (read(g_chld[0], b, sizeof b) > 0)
                ;
        }
        if (sock_slot >= 0 && fds[sock_slot].revents) {
            ssize_t got = recv(g_sock, in + in_n, FR_MAX + 9 + 65536 - in_n, 0);
            if (got <= 0 && !(got < 0 && errno == EINTR)) {
                /* srun is gone: so is the step */
                g_lost = 1;
                sock_open = 0;
                for (long i = 0; i < ntasks; i++)
                    if (tasks[i].pid && !tasks[i].exited && killpg(tasks[i].pid, SIGKILL) != 0)
                        kill(tasks[i].pid, SIGKILL);
            } else if (got > 0) {
                in_n += (size_t)got;
                size_t off = 0;
                while (in_n - off >= 9) {
                    unsigned char *h = (unsigned char *)in + off;
                    uint32_t task = ((uint32_t)h[1] << 24) | ((uint32_t)h[2] << 16) |
                                    ((uint32_t)h[3] << 8) | h[4];
                    size_t len = ((size_t)h[5] << 24) | ((size_t)h[6] << 16) |
                                 ((size_t)h[7] << 8) | h[8];
                    if (len > FR_MAX) {
                        g_lost = 1;
                        sock_open = 0;
                        for (long i = 0; i < ntasks; i++)
                            if (tasks[i].pid && !tasks[i].exited)
                                killpg(tasks[i].pid, SIGKILL);
                        break;
                    }
                    if (in_n - off - 9 < len)
                        break;
                    char *p = in + off + 9;
                    if (h[0] == FR_STDIN || h[0] == FR_STDIN_EOF) {
                        for (long i = 0; i < ntasks; i++) {
                            task_t *t = &tasks[i];
                            if ((task != FR_ALL && task != t->gid) || t->in_fd < 0)
                                continue;
                            if (h[0] == FR_STDIN_EOF) {
                                close(t->in_fd);
                                t->in_fd = -1;
                                continue;
                            }
                            for (size_t w = 0; w < len;) {
                                ssize_t k = write(t->in_fd, p + w, len - w);
                                if (k < 0 && errno == EINTR)
                                    continue;
                                if (k <= 0)
                                    break;
                                w += (size_t)k;
                            }
                        }
                    } else if (h[0] == FR_SIGNAL) {
                        char num[16];
                        size_t l = len < sizeof num - 1 ? len : sizeof num - 1;
                        memcpy(num, p, l);
                        num[l] = 0;
                        int sg = l ? atoi(num) : SIGTERM;
                        for (long i = 0; i < ntasks; i++)
                            if (tasks[i].pid && !tasks[i].exited &&
                                killpg(tasks[i].pid, sg) != 0)
                                kill(tasks[i].pid, sg);
                    }
                    off += 9 + len;
                }
                if (sock_open && off) {
                    memmove(in, in + off, in_n - off);
                    in_n -= off;
                }
            }
        }
        for (size_t k = 0; k < nf; k++) {
            if (fd_task[k] < 0 || !fds[k].revents)
                continue;
            task_t *t = &tasks[fd_task[k]];
            int *fdp = fd_kind[k] == FR_STDOUT ? &t->out_fd : &t->err_fd;
            if (*fdp < 0)
                continue;
            ssize_t got = read(*fdp, chunk, 65536);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got > 0) {
                send_frame((unsigned)fd_kind[k], t->gid, chunk, (size_t)got);
            } else {
                close(*fdp);
                *fdp = -1;
            }
        }
    }
    for (long i = 0; i < ntasks; i++) {
        if (tasks[i].out_fd >= 0) close(tasks[i].out_fd);
        if (tasks[i].err_fd >= 0) close(tasks[i].err_fd);
    }
    double cpu = 0;
    long rss = 0;
    for (long i = 0; i < ntasks; i++) {
        cpu += tasks[i].cpu_s;
        if (tasks[i].rss_kb > rss)
            rss = tasks[i].rss_kb;
    }
    /* {"node":..,"cpu_time_s":..,"max_rss_mb":..,"pids":[..]}: node names are plain */
    size_t cap = 256 + strlen(node) + (size_t)ntasks * 12;
    char *done = malloc(cap);
    if (!done)
        fail("out of memory");
    int n = snprintf(done, cap, "{\"node\":\"%s\",\"cpu_time_s\":%.3f,\"max_rss_mb\":%.3f,\"pids\":[",
                     node, cpu, (double)rss / 1024.0);
    for (long i = 0; i < ntasks; i++)
        n += snprintf(done + n, cap - (size_t)n, "%s%ld", i ? "," : "", (long)tasks[i].pid);
    n += snprintf(done + n, cap - (size_t)n, "]}");
    send_frame(FR_DONE, 0, done, (size_t)n);
    if (g_sock >= 0)
        shutdown(g_sock, SHUT_WR);
    return 0;
}

/* ---- the job's step server ---------------------------------------------------------- */
static void on_chld_server(int s) {
    (void)s;
    int e = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = e;
}

static int g_fifo_r = -1, g_fifo_w = -1; /* the server's FIFO ends (serve) */

/* one plan from fd (its 4-byte length, then the plan): fork its step process.
 * 0: end of input; -1: unreadable or malformed */
static int take_plan(int fd) {
    unsigned char h[4];
    int r = read_full(fd, h, sizeof h);
    if (r <= 0)
        return r == 0 ? 0 : -1;
    size_t n = ((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) | h[3];
    if (n == 0 || n > PLAN_MAX)
        return -1;
    char *buf = malloc(n + 1);
    if (!buf || read_full(fd, buf, n) != 1) {
        free(buf);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the step holds none of the server's inputs: with the server gone, nothing may
         * keep its FIFO open for reading (the agent's next write must fail, not vanish) */
        if (g_fifo_r >= 0)
            close(g_fifo_r);
        if (g_fifo_w >= 0)
            close(g_fifo_w);
        int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (nul >= 0 && nul != 0) {
            dup2(nul, 0);
            close(nul);
        }
        signal(SIGCHLD, SIG_DFL);
        g_plan = buf;
        g_plan_len = n;
        g_pos = 0;
        _exit(run_plan());
    }
    if (pid < 0)
        dprintf(2, "corral-stepd: cannot fork a step: %s\n", strerror(errno));
    free(buf);
    return 1;
}

/* plans come on stdin (the supervisor's pipe) and, when a FIFO path is given, on that
 * FIFO (the agent's direct path); each has one writer, so frames never interleave. The
 * server holds a write end of its own FIFO, so that a writer closing it is no end. */
static int serve(const char *fifo) {
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP && s != SIGCHLD)
            signal(s, SIG_IGN);
    catch_children(on_chld_server);
    int ff = -1;
    if (fifo && *fifo) {
        ff = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        int keep = ff >= 0 ? open(fifo, O_WRONLY | O_CLOEXEC) : -1;
        if (ff >= 0 && keep < 0) {
            close(ff);
            ff = -1;
        }
        g_fifo_r = ff;
        g_fifo_w = keep;
        if (ff >= 0) {
            fcntl(ff, F_SETPIPE_SZ, 1 << 20); /* room for many plans of a frozen job */
            fcntl(ff, F_SETFL, fcntl(ff, F_GETFL) & ~O_NONBLOCK);
        } else {
            dprintf(2, "corral-stepd: cannot open %s: %s\n", fifo, strerror(errno));
        }
    }
    for (;;) {
        struct pollfd p[2] = {{0, POLLIN, 0}, {ff, POLLIN, 0}};
        int r = poll(p, ff >= 0 ? 2 : 1, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("poll");
        if (p[0].revents) {
            int got = take_plan(0);
            if (got == 0)
                return 0; /* the supervisor closed the pipe: the job is ending */
            if (got < 0)
                fail("bad plan from the supervisor");
        }
        if (ff >= 0 && (p[1].revents & POLLIN) && take_plan(ff) < 0) {
            dprintf(2, "corral-stepd: bad plan on %s; no longer reading it\n", fifo);
            close(ff);
            ff = g_fifo_r = -1;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "serve"))
        fail("usage: corral-stepd serve [FIFO]");
    return serve(argc > 2 ? argv[2] : NULL);
}
