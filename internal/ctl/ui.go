package ctl

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/webui"
)

// DefaultUIListen is where `ipkeeperctl ui` serves the address map unless
// --listen says otherwise: loopback only.
const DefaultUIListen = "127.0.0.1:7474"

func (c *cli) uiCmd() *cobra.Command {
	var listen, token string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the address map: a read-only web page of the datastore's pools, blocks and nodes",
		Long: `ui serves the address map of the datastore: every pool as a bar of its
address space with its blocks as a grid coloured by the node that claims
them and filled by use, borrowed and reserved addresses marked, a node
table, search by IP, pod or node, and live updates as addresses are
allocated and released. The page and its JSON API (/api/pools,
/api/nodes, /api/blocks/{cidr}, /api/search?q=, /api/events) are
read-only.

It listens on loopback (` + DefaultUIListen + `) unless --listen says
otherwise. On any other address every request needs the bearer token
(--token, else $` + webui.TokenEnv + `): "Authorization: Bearer <token>", or
open the page once as http://HOST:PORT/?token=<token> (kept in a cookie).
Without a token it refuses to listen there.

The local store is read only when its file changed (checked every second)
and only for as long as the read takes, so plugin calls are not held up;
etcd is watched; the kubernetes datastore is listed every second. Ctrl-C
stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = c.env.Getenv(webui.TokenEnv)
			}
			ds, err := c.datastore()
			if err != nil {
				return err
			}
			u, err := webui.New(webui.Options{
				Datastore: ds, Open: c.env.Open, Listen: listen, Token: token,
				Log: slog.New(slog.NewTextHandler(c.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			fmt.Fprintf(c.env.Stdout, "address map of the %s datastore at http://%s/\n", dsName(ds.Type), l.Addr())
			return u.Serve(cmd.Context(), l)
		},
	}
	cmd.Flags().StringVar(&listen, "listen", DefaultUIListen, "address to serve on (host:port); beyond loopback a token is required")
	cmd.Flags().StringVar(&token, "token", "", "bearer token required from callers (default $"+webui.TokenEnv+")")
	return cmd
}

func dsName(t string) string {
	if t == "" {
		return "local"
	}
	return t
}
