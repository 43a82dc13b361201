package protocol

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseRedisURL(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want RedisURL
	}{
		{"plain", "redis://127.0.0.1:6379/0", RedisURL{Addrs: []string{"127.0.0.1:6379"}}},
		{"plain, db and password", "redis://:s3cret@10.0.0.1:6380/2", RedisURL{Addrs: []string{"10.0.0.1:6380"}, DB: 2, Password: "s3cret"}},
		{"plain, no port, no path", "redis://cache", RedisURL{Addrs: []string{"cache:6379"}}},
		{"plain, empty host", "redis://", RedisURL{Addrs: []string{"localhost:6379"}}},
		{"TLS with ACL user", "rediss://app:p%40ss%3Aw@redis.example:6390/1", RedisURL{TLS: true, Addrs: []string{"redis.example:6390"}, DB: 1, Username: "app", Password: "p@ss:w"}},
		{"IPv6", "redis://[::1]:7000/3", RedisURL{Addrs: []string{"[::1]:7000"}, DB: 3}},
		{"IPv6 without port", "redis://[::1]", RedisURL{Addrs: []string{"[::1]:6379"}}},
		{"upper-case scheme", "REDIS://h:1/0", RedisURL{Addrs: []string{"h:1"}}},
		{"sentinels", "redis+sentinel://h1:26379,h2:26380/mymaster/0", RedisURL{Sentinel: true, Addrs: []string{"h1:26379", "h2:26380"}, Master: "mymaster"}},
		{"sentinels, default port, no db", "redis+sentinel://s1,s2,s3/mymaster", RedisURL{Sentinel: true, Addrs: []string{"s1:26379", "s2:26379", "s3:26379"}, Master: "mymaster"}},
		{"sentinels with everything", "rediss+sentinel://agentvisor:pw@h1:1,h2:2/prod-main/4?sentinel_username=watch&sentinel_password=sp%26x",
			RedisURL{Sentinel: true, TLS: true, Addrs: []string{"h1:1", "h2:2"}, Master: "prod-main", DB: 4, Username: "agentvisor", Password: "pw",
				SentinelUsername: "watch", SentinelPassword: "sp&x"}},
		{"sentinels, trailing slash", "redis+sentinel://h1:1/m/", RedisURL{Sentinel: true, Addrs: []string{"h1:1"}, Master: "m"}},
		{"user without password (a nopass user)", "redis://reader@h:1/0", RedisURL{Addrs: []string{"h:1"}, Username: "reader"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRedisURL(tt.raw)
			if err != nil {
				t.Fatalf("ParseRedisURL(%q): %v", tt.raw, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseRedisURL(%q)\n got %+v\nwant %+v", tt.raw, got, tt.want)
			}
			back, err := ParseRedisURL(got.String())
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("String() %q does not read back: %+v, %v", got.String(), back, err)
			}
		})
	}
}

func TestParseRedisURLRefuses(t *testing.T) {
	tests := []struct {
		name, raw, says string
	}{
		{"no scheme", "127.0.0.1:6379", "want redis://, rediss://, redis+sentinel:// or rediss+sentinel://"},
		{"other scheme", "http://s3cret@h:1/0", `unknown scheme "http"`},
		{"unix socket", "unix:///run/redis.sock", `unknown scheme "unix"`},
		{"bad port", "redis://:s3cret@h:port/0", "a port must be a number from 1 to 65535"},
		{"port out of range", "redis://h:70000/0", "a port must be a number from 1 to 65535"},
		{"bad db", "redis://:s3cret@h:1/zero", "the database must be a number of 0 or more"},
		{"too deep", "redis://h:1/0/1", "too many path segments"},
		{"several hosts without sentinel", "redis://:s3cret@h1:1,h2:2/0", "a redis:// URL names one server"},
		{"sentinel without master", "redis+sentinel://:s3cret@h1:1,h2:2", "needs the master's name"},
		{"sentinel with only a slash", "redis+sentinel://h1:1/", "needs the master's name"},
		{"sentinel, bad db", "redis+sentinel://h1:1/m/x", "the database must be a number"},
		{"empty sentinel address", "redis+sentinel://h1:1,,h2:2/m", "an empty sentinel address"},
		{"unknown query", "redis+sentinel://h1:1/m?password=s3cret", `unknown query parameter "password"`},
		{"query on a plain URL", "redis://h:1/0?sentinel_password=s3cret", `unknown query parameter "sentinel_password"`},
		{"repeated query", "redis+sentinel://h1:1/m?sentinel_password=a&sentinel_password=s3cret", "given 2 times"},
		{"bad escape in password", "redis://:s3cret%zz@h:1/0", "the password is not well escaped"},
		{"fragment", "redis://:s3cret@h:1/0#x", "a fragment (#) has no meaning"},
		{"open IPv6", "redis://[::1:6379/0", "closing bracket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRedisURL(tt.raw)
			if err == nil {
				t.Fatalf("ParseRedisURL(%q) took it", tt.raw)
			}
			if !errors.Is(err, ErrBadRedisURL) {
				t.Fatalf("error %v does not wrap ErrBadRedisURL", err)
			}
			if !strings.HasPrefix(err.Error(), "protocol: bad redis URL: ") || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("error %q, want it to say %q", err, tt.says)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error %q shows the password", err)
			}
			if got := RedactRedisURL(tt.raw); strings.Contains(got, "s3cret") {
				t.Fatalf("RedactRedisURL(%q) = %q", tt.raw, got)
			}
		})
	}
}

func TestRedactedRedisURL(t *testing.T) {
	for _, raw := range []string{
		"redis://:s3cret@h:1/0",
		"rediss://user:s3cret@h:1/0",
		"redis+sentinel://user:s3cret@h1:1,h2:2/m/0?sentinel_password=s3cret&sentinel_username=w",
	} {
		got := RedactRedisURL(raw)
		if strings.Contains(got, "s3cret") || !strings.Contains(got, "xxxxx") {
			t.Errorf("RedactRedisURL(%q) = %q", raw, got)
		}
	}
	u, _ := ParseRedisURL("redis+sentinel://:admin@h1:1,h2:2/m/3?sentinel_password=sp")
	w := u.WithUser("agentvisor:worker:w1", "p@:ss")
	back, err := ParseRedisURL(w.String())
	if err != nil || back.Username != "agentvisor:worker:w1" || back.Password != "p@:ss" || back.SentinelPassword != "sp" || back.Master != "m" || back.DB != 3 {
		t.Fatalf("WithUser: %q reads back as %+v, %v", w.String(), back, err)
	}
	if u.Password != "admin" {
		t.Fatal("WithUser changed its receiver")
	}
}

func TestParseWaitPolicy(t *testing.T) {
	plain, _ := ParseRedisURL("redis://h:1/0")
	sentinel, _ := ParseRedisURL("redis+sentinel://h:1/m")
	tests := []struct {
		name              string
		replicas, timeout string
		u                 RedisURL
		want              WaitPolicy
		bad               bool
	}{
		{"plain: off", "", "", plain, WaitPolicy{0, DefaultRedisWaitTimeout}, false},
		{"sentinel: one replica", "", "", sentinel, WaitPolicy{1, DefaultRedisWaitTimeout}, false},
		{"sentinel turned off", "0", "", sentinel, WaitPolicy{0, DefaultRedisWaitTimeout}, false},
		{"plain turned on", "2", "250ms", plain, WaitPolicy{2, 250 * time.Millisecond}, false},
		{"milliseconds", "1", "1500", plain, WaitPolicy{1, 1500 * time.Millisecond}, false},
		{"bad replicas", "-1", "", plain, WaitPolicy{}, true},
		{"bad timeout", "1", "soon", plain, WaitPolicy{}, true},
		{"zero timeout (WAIT 0 blocks for ever)", "1", "0", plain, WaitPolicy{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWaitPolicy(tt.replicas, tt.timeout, tt.u)
			if tt.bad {
				if err == nil || !strings.HasPrefix(err.Error(), "REDIS_WAIT_") {
					t.Fatalf("got %+v, %v; want an error naming the variable", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// FuzzParseRedisURL: no input panics, an error never quotes a password,
// and what parses reads back the same from its String.
func FuzzParseRedisURL(f *testing.F) {
	for _, s := range []string{"redis://:pw@h:1/0", "rediss+sentinel://u:pw@h1:1,[::1]:2/m/3?sentinel_password=x", "redis://[::1]", "redis+sentinel://h/m%2Fx/0",
		"redis://user:secret99@h:0", "redis://user:secret%zz@h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := ParseRedisURL(raw)
		if err != nil {
			for _, at := range passwordsIn(raw) {
				pw := raw[at[0]:at[1]]
				if len(pw) < 6 || !strings.Contains(err.Error(), pw) {
					continue
				}
				// The text may be words of a fixed message ("+senti" of
				// "redis+sentinel://"): an error quotes the password
				// only if it follows the password when it changes.
				other := shiftAlnum(pw)
				_, err2 := ParseRedisURL(raw[:at[0]] + other + raw[at[1]:])
				if other != pw && err2 != nil && strings.Contains(err2.Error(), other) {
					t.Fatalf("error %q quotes %q", err2, other)
				}
			}
			return
		}
		back, err := ParseRedisURL(u.String())
		if err != nil || !reflect.DeepEqual(back, u) {
			t.Fatalf("%q → %+v → %q → %+v, %v", raw, u, u.String(), back, err)
		}
	})
}

// passwordsIn returns where raw may hold a password, as [start, end)
// offsets: between its first colon and the @ after it (any text), and the
// password of its userinfo read as ParseRedisURL reads a URL's (after the
// first colon of what comes before the authority's last @).
func passwordsIn(raw string) [][2]int {
	var at [][2]int
	if i := strings.Index(raw, ":"); i >= 0 {
		if j := strings.Index(raw[i+1:], "@"); j >= 0 {
			at = append(at, [2]int{i + 1, i + 1 + j})
		}
	}
	if k := strings.Index(raw, "://"); k >= 0 {
		start := k + 3
		authority, _, _ := strings.Cut(raw[start:], "?")
		authority, _, _ = strings.Cut(authority, "/")
		if a := strings.LastIndex(authority, "@"); a >= 0 {
			if c := strings.Index(authority[:a], ":"); c >= 0 {
				at = append(at, [2]int{start + c + 1, start + a})
			}
		}
	}
	return at
}

// shiftAlnum changes every letter and digit of s to the next of its kind
// (z to a, 9 to 0) and keeps the rest, and the two characters after a %
// (an escape stays one, a bad one stays bad), so a URL parses along the
// same path.
func shiftAlnum(s string) string {
	b := []byte(s)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '%':
			i += 2
		case c == 'z', c == 'Z':
			b[i] = c - 25
		case c == '9':
			b[i] = '0'
		case c >= 'a' && c < 'z', c >= 'A' && c < 'Z', c >= '0' && c < '9':
			b[i] = c + 1
		}
	}
	return string(b)
}
