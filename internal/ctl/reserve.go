package ctl

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/store"
)

// reservationView is a reservation as ipkeeperctl prints it.
type reservationView struct {
	Pool     string    `json:"pool"`
	CIDR     string    `json:"cidr"`
	Note     string    `json:"note,omitempty"`
	WhenFree bool      `json:"whenFree"`
	Created  time.Time `json:"created"`
	// HeldBy lists the allocations inside it when it was made (with
	// --when-free): they keep their addresses until released.
	HeldBy []string `json:"heldBy,omitempty"`
}

func newReservationView(r store.Reservation) reservationView {
	return reservationView{Pool: r.Pool, CIDR: r.CIDR.String(), Note: r.Note, WhenFree: r.WhenFree, Created: r.Created}
}

type reservationList struct {
	Reservations []reservationView `json:"reservations"`
}

func (l reservationList) table(w io.Writer) {
	row(w, "POOL", "CIDR", "WHEN FREE", "CREATED", "NOTE")
	for _, r := range l.Reservations {
		wf := "no"
		if r.WhenFree {
			wf = "yes"
		}
		row(w, r.Pool, r.CIDR, wf, since(r.Created), dash(strings.Map(tabless, r.Note)))
		for _, h := range r.HeldBy {
			row(w, "", "  "+h+": kept until released", "", "", "")
		}
	}
}

// tabless keeps a note on its table row.
func tabless(r rune) rune {
	if r == '\t' {
		return ' '
	}
	return r
}

type reservationRemoved struct {
	Removed []reservationView `json:"removed"`
}

func (r reservationRemoved) table(w io.Writer) {
	for _, v := range r.Removed {
		fmt.Fprintf(w, "reservation of %s in pool %s removed\n", v.CIDR, v.Pool)
	}
}

func (c *cli) reserveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reserve",
		Short: "Reserve addresses or CIDRs of pools at runtime: never handed out",
		Long: `Reserve an address or a CIDR of a pool: from the next allocation on, no
node hands it out, without a config change. Reserving an address in use is
refused, naming its holder, unless --when-free: the holder keeps it, and
once released it is not handed out again while reserved.`,
	}
	cmd.AddCommand(c.reserveAddCmd(), c.reserveRmCmd(), c.reserveListCmd())
	return cmd
}

// parseReserved parses ADDR|CIDR: an address is its /32 or /128.
func parseReserved(arg string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(arg); err == nil {
		if a.Zone() != "" || a.Is4In6() {
			return netip.Prefix{}, fmt.Errorf("%q: want a plain IPv4 or IPv6 address or CIDR", arg)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(arg)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: want an address or a CIDR", arg)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("%s has host bits set: did you mean %s?", p, p.Masked())
	}
	return p, nil
}

// poolsHolding names the pools whose CIDR holds cidr: pool alone when set.
func poolsHolding(a *allocator.Allocator, cmd *cobra.Command, pool string, cidr netip.Prefix) ([]string, error) {
	if pool != "" {
		return []string{pool}, nil
	}
	pools, err := a.Pools(cmd.Context())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pools {
		if p.CIDR.Addr().Is4() == cidr.Addr().Is4() && p.CIDR.Bits() <= cidr.Bits() && p.CIDR.Contains(cidr.Addr()) {
			out = append(out, p.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s is in no pool's CIDR ('ipkeeperctl pool list')", allocator.ErrPoolNotFound, cidr)
	}
	return out, nil
}

func (c *cli) reserveAddCmd() *cobra.Command {
	var (
		note, pool string
		whenFree   bool
	)
	cmd := &cobra.Command{
		Use:   "add ADDR|CIDR --note TEXT [--pool P] [--when-free]",
		Short: "Reserve an address or CIDR (in every pool holding it, or --pool)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cidr, err := parseReserved(args[0])
			if err != nil {
				return fmt.Errorf("reserve add: %w", err)
			}
			if strings.TrimSpace(note) == "" {
				return fmt.Errorf("reserve add: --note is required: say why %s is reserved", cidr)
			}
			if pool != "" {
				if err := ValidPoolName(pool); err != nil {
					return fmt.Errorf("--pool: %w", err)
				}
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				names, err := poolsHolding(a, cmd, pool, cidr)
				if err != nil {
					return err
				}
				out := reservationList{Reservations: []reservationView{}}
				var made []store.Reservation
				for _, name := range names {
					r, held, err := a.Reserve(cmd.Context(), store.Reservation{Pool: name, CIDR: cidr, Note: note, WhenFree: whenFree})
					if err != nil {
						// All pools or none: undo those reserved.
						for _, m := range made {
							_, _ = a.Unreserve(cmd.Context(), m.Pool, m.CIDR)
						}
						if errors.Is(err, store.ErrExists) {
							return fmt.Errorf("%s is already reserved in pool %q ('ipkeeperctl reserve list')", cidr, name)
						}
						return err
					}
					made = append(made, r)
					v := newReservationView(r)
					for _, h := range held {
						v.HeldBy = append(v.HeldBy, h.String())
					}
					out.Reservations = append(out.Reservations, v)
				}
				return c.print(out)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&note, "note", "", "why it is reserved (required)")
	f.StringVar(&pool, "pool", "", "the pool (default: every pool whose CIDR holds it)")
	f.BoolVar(&whenFree, "when-free", false, "reserve addresses in use too: each holder keeps its address until it is released")
	return cmd
}

func (c *cli) reserveRmCmd() *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "rm ADDR|CIDR [--pool P]",
		Short: "Remove a reservation (in every pool, or --pool)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cidr, err := parseReserved(args[0])
			if err != nil {
				return fmt.Errorf("reserve rm: %w", err)
			}
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				done, err := a.Unreserve(cmd.Context(), pool, cidr)
				if err != nil {
					return err
				}
				out := reservationRemoved{}
				for _, r := range done {
					out.Removed = append(out.Removed, newReservationView(r))
				}
				return c.print(out)
			})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "the pool (default: every pool)")
	return cmd
}

func (c *cli) reserveListCmd() *cobra.Command {
	var pool string
	cmd := &cobra.Command{
		Use:   "list [--pool P]",
		Short: "List reservations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withStore(cmd.Context(), func(a *allocator.Allocator) error {
				rs, err := a.Reservations(cmd.Context(), pool)
				if err != nil {
					return err
				}
				out := reservationList{Reservations: []reservationView{}}
				for _, r := range rs {
					out.Reservations = append(out.Reservations, newReservationView(r))
				}
				return c.print(out)
			})
		},
	}
	cmd.Flags().StringVar(&pool, "pool", "", "list only this pool's")
	return cmd
}
