// Command goredis runs the client scenarios as go-redis v9 sends them
// (RESP3 through HELLO 3, its pipelines and transactions, Watch, Script,
// PubSub) and prints one JSON object, scenario name to result.
//
// Usage: go run ./suites/clients/goredis HOST:PORT > result.json
//
// Each scenario uses its own keys (cs:go:<scenario>:...), deletes them first
// and returns a value that does not depend on the address it ran against:
// scripts/client-suite.sh runs it against Redis and through rproxy and
// compares the two outputs scenario by scenario.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var addr string

func client(o *redis.Options) *redis.Client {
	if o == nil {
		o = &redis.Options{}
	}
	o.Addr = addr
	o.ReadTimeout = 10 * time.Second
	o.MaxRetries = -1 // a retried command would hide a dropped connection
	return redis.NewClient(o)
}

func key(scen, name string) string { return "cs:go:" + scen + ":" + name }

// val turns a command's result into JSON: errors as {"error": text},
// redis.Nil as null.
func val(v interface{}, err error) interface{} {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	return v
}

func cmds(cs []redis.Cmder) []interface{} {
	out := make([]interface{}, len(cs))
	for i, c := range cs {
		switch c := c.(type) {
		case *redis.Cmd:
			out[i] = val(c.Result())
		case *redis.IntCmd:
			out[i] = val(c.Result())
		case *redis.StringCmd:
			out[i] = val(c.Result())
		case *redis.StatusCmd:
			out[i] = val(c.Result())
		case *redis.DurationCmd:
			d, err := c.Result()
			out[i] = val(d.Seconds(), err)
		case *redis.BoolCmd:
			out[i] = val(c.Result())
		default:
			out[i] = val(fmt.Sprint(c.Args()), c.Err())
		}
	}
	return out
}

func waitBlocked(ctx context.Context, r *redis.Client) bool {
	end := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		info, err := r.Info(ctx, "clients").Result()
		if err == nil {
			for _, l := range strings.Split(info, "\r\n") {
				if strings.HasPrefix(l, "blocked_clients:") && strings.TrimSpace(l[len("blocked_clients:"):]) != "0" {
					return true
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

type scenario struct {
	name string
	run  func(ctx context.Context) (interface{}, error)
}

var scenarios = []scenario{
	{"tx_pipeline", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		a, b, n := key("tx", "a"), key("tx", "b"), key("tx", "n")
		r.Del(ctx, a, b, n)
		r.Set(ctx, a, "x", 0)
		r.Set(ctx, b, "vb", 0)
		cs, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Del(ctx, a)
			p.Get(ctx, b)
			p.Incr(ctx, n)
			p.Set(ctx, a, "y", 100*time.Second)
			p.TTL(ctx, a)
			return nil
		})
		return map[string]interface{}{"replies": cmds(cs), "err": val(nil, err)}, nil
	}},
	{"tx_queue_error", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		s1, s2 := key("txerr", "s1"), key("txerr", "s2")
		r.Del(ctx, s1, s2)
		cs, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, s1, "x", 0)
			p.Do(ctx, "GET") // wrong number of arguments: rejected at queue time
			p.Set(ctx, s2, "y", 0)
			return nil
		})
		return map[string]interface{}{"replies": cmds(cs), "err": val(nil, err),
			"s1": val(r.Exists(ctx, s1).Result()), "s2": val(r.Exists(ctx, s2).Result())}, nil
	}},
	{"tx_exec_error", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		s, c := key("txexec", "s"), key("txexec", "c")
		r.Del(ctx, s, c)
		r.Set(ctx, s, "notanumber", 0)
		cs, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, s)
			p.Incr(ctx, c)
			p.Get(ctx, s)
			return nil
		})
		return map[string]interface{}{"replies": cmds(cs), "err": val(nil, err)}, nil
	}},
	{"watch_retry", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		other := client(nil)
		defer r.Close()
		defer other.Close()
		k := key("watch", "counter")
		r.Del(ctx, k)
		r.Set(ctx, k, 10, 0)
		var attempts []interface{}
		for i := 0; i < 3; i++ {
			err := r.Watch(ctx, func(tx *redis.Tx) error {
				v, err := tx.Get(ctx, k).Int()
				if err != nil {
					return err
				}
				if i == 0 {
					other.Incr(ctx, k)
				}
				_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Set(ctx, k, v*2, 0)
					return nil
				})
				attempts = append(attempts, []interface{}{v, val(nil, err)})
				return err
			}, k)
			if !errors.Is(err, redis.TxFailedErr) {
				break
			}
		}
		return map[string]interface{}{"attempts": attempts, "final": val(r.Get(ctx, k).Result())}, nil
	}},
	{"lua_scripts", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		k, n := key("lua", "k"), key("lua", "n")
		r.Del(ctx, k, n)
		r.ScriptFlush(ctx)
		out := map[string]interface{}{}
		out["eval"] = val(r.Eval(ctx, "redis.call('SET', KEYS[1], ARGV[1]); return {redis.call('GET', KEYS[1]), 42, {ARGV[2], 'nested'}, redis.status_reply('FINE')}", []string{k}, "v1", "x").Result())
		out["eval_error"] = val(r.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{k}).Result())
		incrBy := redis.NewScript("return redis.call('INCRBY', KEYS[1], ARGV[1])")
		out["run_1"] = val(incrBy.Run(ctx, r, []string{n}, 5).Result()) // EVALSHA, NOSCRIPT, EVAL
		out["run_2"] = val(incrBy.Run(ctx, r, []string{n}, 5).Result())
		out["exists"] = val(incrBy.Exists(ctx, r).Result())
		cs, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
			incrBy.EvalSha(ctx, p, []string{n}, 1)
			p.Get(ctx, n)
			return nil
		})
		out["evalsha_in_multi"] = map[string]interface{}{"replies": cmds(cs), "err": val(nil, err)}
		return out, nil
	}},
	{"read_own_writes", func(ctx context.Context) (interface{}, error) {
		// The guides' patterns, each write read back at once, three times
		// (on a cluster with salted copies, reads spread over the copies): a
		// value a script rewrites, a lock with a token released by a script,
		// a counter written by a transaction sent whole and by one typed
		// command by command.
		r := client(nil)
		defer r.Close()
		v, lock, ctr := key("own", "v"), key("own", "lock"), key("own", "ctr")
		r.Del(ctx, v, lock, ctr)
		reads := func(k string) []interface{} {
			var out []interface{}
			for range 3 {
				out = append(out, val(r.Get(ctx, k).Result()))
			}
			return out
		}
		out := map[string]interface{}{}
		r.Set(ctx, v, "v1", 0)
		out["set"] = reads(v)
		out["eval"] = val(r.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1])", []string{v}, "v2").Result())
		out["after_eval"] = reads(v)
		out["lock"] = val(r.SetNX(ctx, lock, "tok1", 10*time.Second).Result())
		out["locked"] = reads(lock)
		release := redis.NewScript("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")
		out["release"] = val(release.Run(ctx, r, []string{lock}, "tok1").Result())
		out["after_release"] = reads(lock)
		cs, err := r.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, ctr)
			p.Expire(ctx, ctr, time.Minute)
			return nil
		})
		out["tx"] = map[string]interface{}{"replies": cmds(cs), "err": val(nil, err)}
		out["after_tx"] = reads(ctr)
		conn := r.Conn()
		defer conn.Close()
		out["typed_tx"] = []interface{}{val(conn.Do(ctx, "MULTI").Result()), val(conn.Do(ctx, "INCR", ctr).Result()), val(conn.Do(ctx, "EXEC").Result())}
		out["after_typed_tx"] = reads(ctr)
		return out, nil
	}},
	{"spubsub_many_channels", func(ctx context.Context) (interface{}, error) {
		// Shard channels of many slots on one connection (on a cluster
		// through rproxy: of every master), subscribed one by one.
		r := client(nil)
		sub := client(nil)
		defer r.Close()
		defer sub.Close()
		var chans []string
		for _, s := range []string{"a", "b", "c", "d", "e", "f"} {
			chans = append(chans, key("sps", s))
		}
		ps := sub.SSubscribe(ctx)
		defer ps.Close()
		var confirmations []string
		receive := func() error {
			m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
			switch m := m.(type) {
			case *redis.Subscription:
				confirmations = append(confirmations, fmt.Sprintf("%s %s %d", m.Kind, m.Channel, m.Count))
			default:
				confirmations = append(confirmations, fmt.Sprint(m))
			}
			return err
		}
		for _, ch := range chans {
			if err := ps.SSubscribe(ctx, ch); err != nil {
				return nil, err
			}
			if err := receive(); err != nil {
				return nil, err
			}
		}
		var receivers []interface{}
		for _, ch := range chans {
			receivers = append(receivers, val(r.SPublish(ctx, ch, "m1").Result()))
		}
		var got []string
		for len(got) < len(chans) {
			m, err := ps.ReceiveTimeout(ctx, time.Second)
			if err != nil {
				break
			}
			if msg, ok := m.(*redis.Message); ok {
				got = append(got, msg.Channel+" "+msg.Payload)
			}
		}
		if err := ps.SUnsubscribe(ctx, chans[1]); err != nil {
			return nil, err
		}
		if err := receive(); err != nil {
			return nil, err
		}
		if err := ps.Ping(ctx, "p"); err != nil {
			return nil, err
		}
		if err := receive(); err != nil {
			return nil, err
		}
		sort.Strings(got)
		return map[string]interface{}{"confirmations": confirmations, "spublish_receivers": receivers, "messages": got}, nil
	}},
	{"pubsub_subscribe_then_publish", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		sub := client(nil)
		defer r.Close()
		defer sub.Close()
		ch, pat := key("ps", "ch"), key("ps", "*")
		ps := sub.Subscribe(ctx, ch)
		defer ps.Close()
		first, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			return nil, err
		}
		if err := ps.PSubscribe(ctx, pat); err != nil {
			return nil, err
		}
		second, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			return nil, err
		}
		var receivers []interface{}
		for i := 0; i < 20; i++ {
			receivers = append(receivers, val(r.Publish(ctx, ch, fmt.Sprintf("m%d", i)).Result()))
		}
		var got []string
		for len(got) < 40 {
			m, err := ps.ReceiveTimeout(ctx, time.Second)
			if err != nil {
				break
			}
			if msg, ok := m.(*redis.Message); ok {
				kind := "message"
				if msg.Pattern != "" {
					kind = "pmessage"
				}
				got = append(got, kind+" "+msg.Payload)
			}
		}
		sort.Strings(got)
		return map[string]interface{}{"subscribe": fmt.Sprint(first), "psubscribe": fmt.Sprint(second),
			"publish_receivers": receivers, "messages": got}, nil
	}},
	{"tracking_redirect", func(ctx context.Context) (interface{}, error) {
		// Client-side caching as RESP2 clients do it: one connection
		// subscribes to __redis__:invalidate, another turns tracking on
		// with REDIRECT to it and reads; a third client's writes
		// invalidate what the second read.
		var target int64
		sub := client(&redis.Options{Protocol: 2, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			id, err := cn.ClientID(ctx).Result()
			target = id
			return err
		}})
		defer sub.Close()
		ps := sub.Subscribe(ctx, "__redis__:invalidate")
		defer ps.Close()
		confirm, err := ps.ReceiveTimeout(ctx, 5*time.Second)
		if err != nil {
			return nil, err
		}
		var tracking interface{}
		tr := client(&redis.Options{Protocol: 2, PoolSize: 1, OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			tracking = val(cn.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", target).Result())
			return nil
		}})
		defer tr.Close()
		w := client(nil)
		defer w.Close()
		k := key("track", "k")
		w.Del(ctx, k)
		w.Set(ctx, k, "v1", 0)
		invalidated := func() interface{} {
			m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
			if err != nil {
				return map[string]string{"error": err.Error()}
			}
			if msg, ok := m.(*redis.Message); ok {
				return map[string]interface{}{"channel": msg.Channel, "keys": msg.PayloadSlice, "payload": msg.Payload}
			}
			return fmt.Sprint(m)
		}
		first := val(tr.Get(ctx, k).Result())
		redir, err := tr.Do(ctx, "CLIENT", "GETREDIR").Int64()
		w.Set(ctx, k, "v2", 0)
		afterSet := invalidated()
		second := val(tr.Get(ctx, k).Result())
		w.Del(ctx, k)
		afterDel := invalidated()
		return map[string]interface{}{"subscribe": fmt.Sprint(confirm), "tracking": tracking,
			"getredir_is_target": val(redir == target, err), "get": []interface{}{first, second},
			"after_set": afterSet, "after_del": afterDel}, nil
	}},
	{"stream_group_block", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		c := client(nil)
		defer r.Close()
		defer c.Close()
		s := key("stream", "s")
		r.Del(ctx, s)
		r.XGroupCreateMkStream(ctx, s, "g", "$")
		done := make(chan interface{}, 1)
		go func() {
			done <- val(c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1",
				Streams: []string{s, ">"}, Count: 10, Block: 5 * time.Second}).Result())
		}()
		blocked := waitBlocked(ctx, r)
		r.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: "1-1", Values: []string{"f", "v"}})
		r.XAdd(ctx, &redis.XAddArgs{Stream: s, ID: "2-1", Values: []string{"f", "w"}})
		var read interface{}
		select {
		case read = <-done:
		case <-time.After(10 * time.Second):
			read = "no reply in 10s"
		}
		pend, err := r.XPending(ctx, s, "g").Result()
		var pending interface{} = val(nil, err)
		if err == nil {
			pending = pend.Count
		}
		return map[string]interface{}{"blocked_seen": blocked, "read": read, "pending": pending,
			"ack": val(r.XAck(ctx, s, "g", "1-1", "2-1").Result()),
			"empty": val(r.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c1",
				Streams: []string{s, ">"}, Count: 10, Block: 100 * time.Millisecond}).Result())}, nil
	}},
	{"blpop_blocking", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		c := client(nil)
		defer r.Close()
		defer c.Close()
		l := key("blpop", "l")
		r.Del(ctx, l)
		done := make(chan interface{}, 1)
		go func() { done <- val(c.BLPop(ctx, 5*time.Second, l).Result()) }()
		blocked := waitBlocked(ctx, r)
		pushed := val(r.RPush(ctx, l, "v1", "v2").Result())
		var pop interface{}
		select {
		case pop = <-done:
		case <-time.After(10 * time.Second):
			pop = "no reply in 10s"
		}
		return map[string]interface{}{"blocked_seen": blocked, "rpush": pushed, "pop": pop,
			"left":    val(r.LRange(ctx, l, 0, -1).Result()),
			"timeout": val(c.BLPop(ctx, 200*time.Millisecond, key("blpop", "empty")).Result())}, nil
	}},
	{"select_db", func(ctx context.Context) (interface{}, error) {
		r9 := client(&redis.Options{DB: 9})
		r0 := client(nil)
		defer r9.Close()
		defer r0.Close()
		k, n := key("select", "k"), key("select", "n")
		r9.Del(ctx, k, n)
		r0.Del(ctx, k)
		r9.Set(ctx, k, "in9", 0)
		cs, err := r9.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, n)
			p.Get(ctx, k)
			return nil
		})
		r9.Del(ctx, n)
		return map[string]interface{}{"db9": val(r9.Get(ctx, k).Result()), "db0": val(r0.Get(ctx, k).Result()),
			"tx_db9": cmds(cs), "tx_err": val(nil, err)}, nil
	}},
	{"client_name_id", func(ctx context.Context) (interface{}, error) {
		r := client(&redis.Options{ClientName: "cs-go-name"})
		defer r.Close()
		conn := r.Conn()
		defer conn.Close()
		id, err := conn.ClientID(ctx).Result()
		if err != nil {
			return nil, err
		}
		list, _ := conn.ClientList(ctx).Result()
		var mine []string
		for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
			if strings.Contains(l, " name=cs-go-name ") {
				mine = append(mine, l)
			}
		}
		info, err := conn.ClientInfo(ctx).Result()
		out := map[string]interface{}{
			"getname":            val(conn.ClientGetName(ctx).Result()),
			"list_has_name_once": len(mine) == 1,
			"list_id_matches":    len(mine) == 1 && strings.HasPrefix(mine[0], fmt.Sprintf("id=%d ", id)),
		}
		if err != nil {
			out["info"] = val(nil, err)
		} else {
			out["info_name"] = info.Name
			out["info_id_matches"] = info.ID == id
		}
		return out, nil
	}},
	{"client_unblock", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		c := client(nil)
		defer r.Close()
		defer c.Close()
		l := key("unblock", "l")
		r.Del(ctx, l)
		conn := c.Conn()
		defer conn.Close()
		id, err := conn.ClientID(ctx).Result()
		if err != nil {
			return nil, err
		}
		done := make(chan interface{}, 1)
		t0 := time.Now()
		go func() { done <- val(conn.BLPop(ctx, 5*time.Second, l).Result()) }()
		blocked := waitBlocked(ctx, r)
		unblocked := val(r.ClientUnblock(ctx, id).Result())
		pop := <-done
		return map[string]interface{}{"blocked_seen": blocked, "unblock": unblocked, "pop": pop,
			"returned_early": time.Since(t0) < 4*time.Second}, nil
	}},
	{"pipeline_mixed", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		k, s := key("pipe", "n"), key("pipe", "s")
		r.Del(ctx, k, s)
		r.Set(ctx, s, "text", 0)
		cs, _ := r.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := 0; i < 100; i++ {
				p.Incr(ctx, k)
				if i == 50 {
					p.Incr(ctx, s)
				}
				p.Get(ctx, k)
			}
			return nil
		})
		out := cmds(cs)
		return map[string]interface{}{"len": len(out), "first": out[:4], "around_error": out[100:105], "last": out[len(out)-2:]}, nil
	}},
	{"expiry_exact", func(ctx context.Context) (interface{}, error) {
		r := client(nil)
		defer r.Close()
		a, b := key("ttl", "a"), key("ttl", "b")
		r.Del(ctx, a, b)
		r.Set(ctx, a, "v", 1000*time.Second)
		r.Set(ctx, b, "v", 0)
		r.Expire(ctx, b, 2000*time.Second)
		out := map[string]interface{}{"ttl_a": r.TTL(ctx, a).Val().Seconds(), "ttl_b": r.TTL(ctx, b).Val().Seconds()}
		r.PExpire(ctx, a, 500*time.Second)
		out["pttl_a_s"] = r.PTTL(ctx, a).Val().Round(time.Second).Seconds()
		r.GetEx(ctx, b, 3000*time.Second)
		out["ttl_b_getex"] = r.TTL(ctx, b).Val().Seconds()
		return out, nil
	}},
	{"acl_user", func(ctx context.Context) (interface{}, error) {
		// An ACL user (ACL SETUSER): a client logged in as it (Options'
		// Username and Password: HELLO 3 AUTH at connect) gets what its
		// rules allow and NOPERM for the rest; a wrong password and a
		// deleted user are refused at connect.
		admin := client(nil)
		defer admin.Close()
		user, pw := "cs-go-acl", "cs-go-acl-pw"
		mine, other := key("acl", "k"), key("acl_other", "k")
		admin.Do(ctx, "ACL", "DELUSER", user)
		admin.Del(ctx, mine, other)
		if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">"+pw, "~"+key("acl", "*"),
			"+@connection", "+get", "+set", "+del", "+acl|whoami").Err(); err != nil {
			return nil, err
		}
		u := client(&redis.Options{Username: user, Password: pw})
		out := map[string]interface{}{
			"whoami":           val(u.Do(ctx, "ACL", "WHOAMI").Result()),
			"set":              val(u.Set(ctx, mine, "v", 0).Result()),
			"get":              val(u.Get(ctx, mine).Result()),
			"get_other_key":    val(u.Get(ctx, other).Result()),
			"incr_not_allowed": val(u.Incr(ctx, mine).Result()),
		}
		cs, _ := u.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, mine, "w", 0)
			p.Incr(ctx, mine)
			p.Get(ctx, mine)
			return nil
		})
		out["pipeline"] = cmds(cs)
		u.Close()
		wrong := client(&redis.Options{Username: user, Password: "nope"})
		out["wrong_password"] = val(wrong.Ping(ctx).Result())
		wrong.Close()
		admin.Do(ctx, "ACL", "DELUSER", user)
		gone := client(&redis.Options{Username: user, Password: pw})
		out["deleted_user"] = val(gone.Ping(ctx).Result())
		gone.Close()
		admin.Del(ctx, mine)
		return out, nil
	}},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: goredis HOST:PORT")
		os.Exit(2)
	}
	addr = os.Args[1]
	res := map[string]interface{}{}
	for _, s := range scenarios {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		v, err := s.run(ctx)
		cancel()
		if err != nil {
			v = map[string]string{"exception": err.Error()}
		}
		res[s.name] = v
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
