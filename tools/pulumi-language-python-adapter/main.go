// Command pulumi-language-python-adapter lets the pinned Pulumi CLI run Python policy packs
// with the Python language host this project can build.
//
// Why it exists: the Python language host's own Go module is not served by the module proxy
// reachable here, so scripts/setup.sh builds the official host, unmodified, from sdk/v3
// v3.68.0 (the newest release that ships it). That host predates the LanguageRuntime.RunPlugin
// RPC, which newer CLIs use to start policy packs (`pulumi preview --policy-pack DIR` where
// DIR/PulumiPolicy.yaml says `runtime: python`), so policy packs could not start.
//
// The adapter sits between the CLI and that host. It starts the real host as a child, forwards
// every LanguageRuntime RPC to it byte for byte (a transparent gRPC proxy), and implements only
// RunPlugin for kind "analyzer" itself, the way newer official hosts do: it runs
// `python -u -m pulumi.policy <args...> <policy pack dir>` from the pack's virtualenv and
// streams its output and exit code back. It also keeps the host's answer to
// GetRequiredPlugins while the virtualenv is unchanged (plugincache.go), which the host would
// otherwise compute with `pip list` on every run. It adds no engine behaviour of its own.
//
// Usage (the pulumi-language-python shim written by scripts/setup.sh):
//
//	pulumi-language-python-adapter -host=HOST -use-executor=EXEC [-virtualenv=VENV] [CLI args...] ENGINE
//
// The host gets `-use-executor=EXEC -virtualenv=VENV`, the CLI's flags it understands, and the
// engine address (the last positional argument); other flags are ignored, as it would fail on them.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	maxMsgSize      = 400 << 20 // the CLI's own gRPC message limit (rpcutil)
	runPluginMethod = "/pulumirpc.LanguageRuntime/RunPlugin"
)

// frame is one gRPC message, left encoded; rawCodec moves frames without decoding them.
type frame []byte

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return *f, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*f = append((*f)[:0], data...) // data is reused by grpc after this returns
	return nil
}

type options struct {
	host, executor, virtualenv string
	hostArgs                   []string // the CLI's flags that the host understands
	engine                     string   // the engine address: the last positional argument
}

// hostFlags are the flags the v3.68 host accepts (its own and glog's), true if they take a
// value; it exits on any other flag, so the CLI's other flags are dropped here.
var hostFlags = map[string]bool{
	"tracing": true, "root": true, "v": true, "vmodule": true, "log_dir": true,
	"stderrthreshold": true, "log_backtrace_at": true, "logtostderr": false, "alsologtostderr": false,
}

func parseArgs(args []string) (options, error) {
	var o options
	own := map[string]*string{"host": &o.host, "use-executor": &o.executor, "virtualenv": &o.virtualenv}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				o.engine = args[len(args)-1]
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			o.engine = a
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		dst, isOwn := own[name]
		takesValue, isHost := hostFlags[name]
		if (isOwn || (isHost && takesValue)) && !hasValue {
			if i+1 == len(args) {
				return o, fmt.Errorf("flag %s needs a value", a)
			}
			i++
			value = args[i]
		}
		switch {
		case isOwn:
			*dst = value
		case isHost && takesValue:
			o.hostArgs = append(o.hostArgs, "-"+name+"="+value)
		case isHost:
			o.hostArgs = append(o.hostArgs, a)
		} // anything else: a flag of a newer CLI, unknown to the host
	}
	if o.host == "" || o.executor == "" {
		return o, errors.New("usage: pulumi-language-python-adapter -host=HOST -use-executor=EXEC " +
			"[-virtualenv=VENV] [language host args...] ENGINE_ADDRESS")
	}
	return o, nil
}

// startHost starts the real language host and returns it, its address and its stdout
// (already past the port line).
func startHost(o options) (*exec.Cmd, string, *bufio.Reader, error) {
	args := []string{"-use-executor=" + o.executor}
	if o.virtualenv != "" {
		args = append(args, "-virtualenv="+o.virtualenv)
	}
	args = append(args, o.hostArgs...)
	if o.engine != "" {
		args = append(args, o.engine)
	}
	cmd := exec.Command(o.host, args...)
	cmd.Stderr = os.Stderr
	setParentDeathSignal(cmd)
	// An os.Pipe rather than StdoutPipe: Wait must not close it while its output is copied.
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, "", nil, err
	}
	cmd.Stdout = pw
	err = cmd.Start()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, "", nil, fmt.Errorf("starting %s: %w", o.host, err)
	}
	out := bufio.NewReader(pr)
	line, err := out.ReadString('\n')
	port, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil || port <= 0 || port > 65535 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, "", nil, fmt.Errorf("%s did not print its port (got %q)", o.host, line)
	}
	return cmd, "127.0.0.1:" + strconv.Itoa(port), out, nil
}

type proxy struct {
	host       *grpc.ClientConn
	virtualenv string       // the program's virtualenv (absolute), a fallback for policy packs
	plugins    *pluginCache // nil without a virtualenv
}

func (p *proxy) handle(_ any, ss grpc.ServerStream) error {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return status.Error(codes.Internal, "no method name in the stream")
	}
	if method == runPluginMethod {
		return p.runPlugin(ss)
	}
	if method == requiredPluginsMethod && p.plugins != nil {
		return p.requiredPlugins(ss)
	}
	return p.forward(method, ss)
}

// forward relays one call of any shape (unary or streaming) to the host, unchanged.
func (p *proxy) forward(method string, ss grpc.ServerStream) error {
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	cs, err := p.host.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, method)
	if err != nil {
		return err
	}
	go func() { // CLI -> host
		for {
			var f frame
			if err := ss.RecvMsg(&f); err != nil {
				if err == io.EOF {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if cs.SendMsg(&f) != nil {
				return // the host's status arrives through RecvMsg below
			}
		}
	}()
	if md, err := cs.Header(); err == nil && len(md) > 0 {
		if err := ss.SendHeader(md); err != nil {
			return err
		}
	}
	for { // host -> CLI
		var f frame
		if err := cs.RecvMsg(&f); err != nil {
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				return nil
			}
			return err // the host's status, as is
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

// outgoing carries the CLI's call metadata on to the host.
func outgoing(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return metadata.NewOutgoingContext(ctx, md.Copy())
	}
	return ctx
}

// runPlugin runs a Python policy pack (kind "analyzer") with `python -m pulumi.policy`.
func (p *proxy) runPlugin(ss grpc.ServerStream) error {
	var in frame
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	req := &pulumirpc.RunPluginRequest{}
	if err := proto.Unmarshal(in, req); err != nil {
		return status.Errorf(codes.InvalidArgument, "RunPlugin: bad request: %v", err)
	}
	if req.GetKind() != "analyzer" {
		return status.Errorf(codes.Unimplemented, "RunPlugin: gpu-fleet's Python language host adapter "+
			"runs only policy packs (kind \"analyzer\"), not %q plugins (%s)", req.GetKind(), req.GetName())
	}
	info := req.GetInfo()
	program := req.GetProgram() //nolint:staticcheck // the deprecated field is the fallback
	if info.GetProgramDirectory() != "" {
		program = filepath.Join(info.GetProgramDirectory(), info.GetEntryPoint())
	}
	if program == "" {
		return status.Error(codes.InvalidArgument, "RunPlugin: no program directory in the request")
	}

	env := append(os.Environ(), req.GetEnv()...)
	python := "python3"
	venv := info.GetOptions().GetFields()["virtualenv"].GetStringValue()
	if venv != "" && !filepath.IsAbs(venv) {
		venv = filepath.Join(info.GetRootDirectory(), venv)
	}
	if venv == "" {
		venv = p.virtualenv
	}
	if venv == "" {
		venv = lookupEnv(env, "PULUMI_RUNTIME_VIRTUALENV")
	}
	if venv != "" {
		python = filepath.Join(venv, "bin", "python")
		env = append(env, "VIRTUAL_ENV="+venv,
			"PATH="+filepath.Join(venv, "bin")+string(os.PathListSeparator)+lookupEnv(env, "PATH"))
	}

	args := append([]string{"-u", "-m", "pulumi.policy"}, req.GetArgs()...)
	cmd := exec.CommandContext(ss.Context(), python, append(args, program)...)
	cmd.Dir = req.GetPwd()
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	setParentDeathSignal(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if err := cmd.Start(); err != nil {
		return status.Errorf(codes.FailedPrecondition, "RunPlugin: starting policy pack %s with %s: %v",
			program, python, err)
	}

	var sendMu sync.Mutex
	send := func(r *pulumirpc.RunPluginResponse) error {
		b, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		f := frame(b)
		sendMu.Lock()
		defer sendMu.Unlock()
		return ss.SendMsg(&f)
	}
	var pumps sync.WaitGroup
	pump := func(r io.Reader, wrap func([]byte) *pulumirpc.RunPluginResponse) {
		defer pumps.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_ = send(wrap(buf[:n])) // on a failed send keep draining; the context ends the process
			}
			if err != nil {
				return
			}
		}
	}
	pumps.Add(2)
	go pump(stdout, func(b []byte) *pulumirpc.RunPluginResponse {
		return &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stdout{Stdout: b}}
	})
	go pump(stderr, func(b []byte) *pulumirpc.RunPluginResponse {
		return &pulumirpc.RunPluginResponse{Output: &pulumirpc.RunPluginResponse_Stderr{Stderr: b}}
	})
	pumps.Wait()
	err = cmd.Wait()
	if ctxErr := ss.Context().Err(); ctxErr != nil {
		return status.FromContextError(ctxErr).Err()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return status.Errorf(codes.Internal, "RunPlugin: policy pack %s: %v", program, err)
	}
	return send(&pulumirpc.RunPluginResponse{
		Output: &pulumirpc.RunPluginResponse_Exitcode{Exitcode: int32(cmd.ProcessState.ExitCode())},
	})
}

func interrupted(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && (ws.Signal() == syscall.SIGINT || ws.Signal() == syscall.SIGTERM)
}

// lookupEnv returns the last value of key in env (exec uses the last duplicate).
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-language-python-adapter: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := parseArgs(os.Args[1:])
	if err != nil {
		return err
	}
	p := &proxy{}
	if o.virtualenv != "" {
		if p.virtualenv, err = filepath.Abs(o.virtualenv); err != nil {
			return err
		}
		if cwd, err := os.Getwd(); err == nil {
			p.plugins = &pluginCache{venv: p.virtualenv, cwd: cwd}
		}
	}
	// Interrupts (the CLI signals the whole process group) are handled below, after start-up.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)

	host, addr, hostOut, err := startHost(o)
	if err != nil {
		return err
	}
	hostDone := make(chan error, 1)
	go func() { hostDone <- host.Wait() }()
	stopHost := func() {
		select {
		case <-hostDone:
			return
		default:
		}
		_ = host.Process.Signal(syscall.SIGTERM)
		select {
		case <-hostDone:
		case <-time.After(3 * time.Second):
			_ = host.Process.Kill()
			<-hostDone
		}
	}

	p.host, err = grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
			grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		stopHost()
		return err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stopHost()
		return err
	}
	srv := grpc.NewServer(
		grpc.UnknownServiceHandler(p.handle),
		grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(maxMsgSize), grpc.MaxSendMsgSize(maxMsgSize),
		grpc.WaitForHandlers(true), // Stop waits for policy packs to be killed and reaped
	)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	// The port first, as language plugins do; then whatever the host writes (program output).
	fmt.Printf("%d\n", lis.Addr().(*net.TCPAddr).Port)
	go func() { _, _ = io.Copy(os.Stdout, hostOut) }()

	var result error
	select {
	case <-sigs:
	case err := <-hostDone:
		hostDone <- err // for stopHost
		// The CLI interrupts the whole process group; the host may see it before we do.
		if !interrupted(host.ProcessState) {
			result = fmt.Errorf("language host %s exited: %v", o.host, err)
		}
	case err := <-served:
		result = fmt.Errorf("serving: %w", err)
	}
	srv.Stop()
	stopHost()
	_ = p.host.Close()
	return result
}
