package dlock

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock/internal/script"
)

// The Lua scripts, one per operation, and their helpers in lua/lib: see
// internal/script.
//
//go:embed lua
var scriptFiles embed.FS

var scriptFS, _ = fs.Sub(scriptFiles, "lua")

var lua = script.MustLibrary(scriptFS)

var (
	ownerRefresh = loadBatched("owner_refresh.lua", "owner_renewals.lua", tokenTail, unpackRenewals, notExtended)
	electRefresh = lua.MustLoad("owner_refresh.lua")
	ownerHeld    = lua.MustLoad("owner_held.lua")
	forceUnlock  = lua.MustLoad("force_unlock.lua")
	queueAcquire = lua.MustLoad("queue_acquire.lua")
	queueBeat    = loadBatched("queue_beat.lua", "queue_beats.lua", tokenTail, unpackBeats, nil)
	queueRelease = lua.MustLoad("queue_release.lua")
	queueLeave   = lua.MustLoad("queue_leave.lua")
	queueStatus  = lua.MustLoad("queue_status.lua")
	rwLock       = loadNaming("rw_lock.lua", rwParts)
	rwUnlock     = loadNaming("rw_unlock.lua", rwParts)
	rwLeave      = loadNaming("rw_leave.lua", rwParts)
	rwRLock      = lua.MustLoad("rw_rlock.lua")    // names its keys as it reads them
	rwRUnlock    = lua.MustLoad("rw_runlock.lua")  // likewise
	rwRRefresh   = lua.MustLoad("rw_rrefresh.lua") // a share's keys only
	rwRHeld      = lua.MustLoad("rw_rheld.lua")    // a share's expiries only
	rwStatus     = loadNaming("rw_status.lua", rwParts)

	redlockAcquire = lua.MustLoad("redlock_acquire.lua")
	redlockRelease = lua.MustLoad("redlock_release.lua")
	redlockStatus  = lua.MustLoad("redlock_status.lua")

	setAdd     = loadNaming("set_add.lua", append(setParts, oldSetParts...))
	setRemove  = loadNaming("set_remove.lua", append(setParts, oldSetParts...))
	setConvert = loadNaming("set_convert.lua", append(setParts, oldSetParts...))
	setAcquire = loadLazyNaming("set_acquire.lua", setParts)
	setRelease = loadLazyNaming("set_release.lua", setParts)
	setLeave   = loadNaming("set_leave.lua", setParts)
	setRefresh = loadNaming("set_refresh.lua", setParts)
	setHeld    = loadNaming("set_held.lua", setParts)
	setMembers = loadNaming("set_members.lua", setParts)
	setStatus  = loadNaming("set_status.lua", setParts)

	semAcquire = loadNaming("sem_acquire.lua", semParts)
	semRelease = loadNaming("sem_release.lua", semParts)
	semLeave   = loadNaming("sem_leave.lua", semParts)
	semRefresh = lua.MustLoad("sem_refresh.lua") // its main key and leases only
	semHeld    = lua.MustLoad("sem_held.lua")    // the same
	semStatus  = loadNaming("sem_status.lua", semParts)

	electLeader   = lua.MustLoad("elect_leader.lua")
	electProclaim = lua.MustLoad("elect_proclaim.lua")
)

// loadNaming loads the script name of a kind whose scripts are sent its
// main key alone on a single Redis (lock.kl), parts being the
// kind's other keys in the order of its KEYS: the script starts with a
// local KEYS, the one sent or, when only the main key was, that key and
// the others named as keys.Lock.Part does (the main key and ':' and the
// part), so that the rest, its helpers too, reads KEYS as on a Cluster.
// (Filling in the KEYS sent would cost Redis as much as sending them:
// the table grows four times.) Named all at once, a key costs Redis
// about three quarters of what one sent does, so the queued kinds'
// scripts, on the hottest path, name only the keys each of their paths
// reads, where it reads them (see TestScriptsNameTheKeysTheyAreNotSent).
func loadNaming(name string, parts []string) *redis.Script {
	return redis.NewScript("local KEYS = KEYS\n" + namingKeys(parts) + source(name))
}

// loadLazyNaming is loadNaming for a script whose common path names the
// few keys it reads itself (KEYS[i] or the main key and ':part'): the
// naming of them all stands where the script has a line that reads
// exactly "name_keys()", which must be at its top level, and not in a
// function, which would cost each run a closure.
func loadLazyNaming(name string, parts []string) *redis.Script {
	src := source(name)
	const mark = "\nname_keys()\n"
	if strings.Count(src, mark) != 1 {
		panic("dlock: " + name + " has no name_keys() line, or more than one")
	}
	return redis.NewScript("local KEYS = KEYS\n" + strings.Replace(src, mark, "\n"+namingKeys(parts), 1))
}

// namingKeys is the Lua that names every key from the main key when
// KEYS holds that one alone.
func namingKeys(parts []string) string {
	var b strings.Builder
	b.WriteString("if not KEYS[2] then\n  local main = KEYS[1]\n  KEYS = {main")
	for _, p := range parts {
		fmt.Fprintf(&b, ", main .. ':%s'", p)
	}
	b.WriteString("}\nend\n")
	return b.String()
}

// source is the script called name, with its helpers.
func source(name string) string {
	src, err := lua.Source(name)
	if err != nil {
		panic(err)
	}
	return src
}
