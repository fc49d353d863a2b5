// Command ipkeeper-install runs in the ipkeeper-node DaemonSet and puts
// ipkeeper on a Kubernetes node (see internal/install).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/ipkeeper/ipkeeper/internal/install"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	opts, err := install.ParseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipkeeper-install:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := install.Run(ctx, opts, log); err != nil {
		log.Error("ipkeeper-install failed", "err", err)
		os.Exit(1)
	}
}
