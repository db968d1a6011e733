package detect

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	"github.com/card-dev/card/agent"
	"github.com/card-dev/card/api"
)

// droidLoginFiles are the files Droid 0.225 keeps a Factory sign-in in
// (names found in the binary). Their contents are encrypted or point at the
// OS keyring; only their existence is looked at.
var droidLoginFiles = []string{"auth.v2.file", "auth.v2.key", "auth.v2.keyring", "auth.encrypted", "auth.json"}

// droidFacts is what the Droid decision looks at: names and presence only.
type droidFacts struct {
	APIKeyEnv    bool   // FACTORY_API_KEY is set
	LoginFile    string // the first droidLoginFiles entry present, "" for none
	CustomModels int    // BYOK entries in ~/.factory/settings.json
	SettingsErr  error
}

func readDroidFacts(home string, getenv func(string) string) droidFacts {
	f := droidFacts{APIKeyEnv: strings.TrimSpace(getenv("FACTORY_API_KEY")) != ""}
	dir := filepath.Join(home, ".factory")
	if o := strings.TrimSpace(getenv("FACTORY_HOME_OVERRIDE")); o != "" {
		dir = filepath.Join(o, ".factory")
	}
	for _, name := range droidLoginFiles {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			f.LoginFile = name
			break
		}
	}
	keys, exists, err := readJSONShape(filepath.Join(dir, "settings.json"))
	f.SettingsErr = err
	if exists && err == nil && rawPresent(keys, "customModels") {
		var models []json.RawMessage // counted, never decoded: entries hold API keys
		if json.Unmarshal(keys["customModels"], &models) == nil {
			f.CustomModels = len(models)
		}
	}
	return f
}

func droidAuthKind(in AuthInput) api.AuthKind {
	f := readDroidFacts(in.Home, in.Getenv)
	switch {
	case f.APIKeyEnv || f.CustomModels > 0:
		return api.AuthAPIKey
	case f.LoginFile != "":
		return api.AuthSubscription
	case f.SettingsErr != nil:
		return api.AuthKindUnknown
	}
	return api.AuthUnauthenticated
}

// droidFileBased is appended to every Droid reason: `droid doctor` calls
// Factory's servers, so health is decided offline from what is on disk.
const droidFileBased = " (decided from FACTORY_API_KEY in the daemon's environment and ~/.factory: card does not run `droid doctor`, which calls Factory's servers)"

const droidLoginHint = "run `droid` once and sign in, set FACTORY_API_KEY in the daemon's environment (https://app.factory.ai/settings/api-keys), or add a BYOK entry to customModels in ~/.factory/settings.json"

func droidHealth(_ context.Context, in HealthInput) HealthVerdict {
	return droidVerdict(readDroidFacts(in.Home, in.Getenv))
}

// droidVerdict is the pure decision over the facts.
func droidVerdict(f droidFacts) HealthVerdict {
	details := map[string]any{
		"decided_from":        "files",
		"factory_api_key_set": f.APIKeyEnv, // whether the variable is set, never its value
		"login_file":          f.LoginFile,
		"custom_model_count":  f.CustomModels,
	}
	v := func(s api.HealthStatus, reason string) HealthVerdict {
		return HealthVerdict{Status: s, Reason: reason + droidFileBased, Details: details}
	}
	switch {
	case f.APIKeyEnv:
		withAuth(details, MethodAPIKey, "FACTORY_API_KEY")
		return v(api.StatusReady, "FACTORY_API_KEY is set; card did not ask Factory whether it is valid")
	case f.LoginFile != "":
		withAuth(details, MethodSubscription, "the Factory sign-in in ~/.factory/"+f.LoginFile)
		return v(api.StatusReady, "a Factory sign-in is saved in ~/.factory/"+f.LoginFile+" (card cannot check whether it has expired)")
	case f.SettingsErr != nil:
		return v(api.StatusUnknown, "~/.factory/settings.json could not be read ("+f.SettingsErr.Error()+"); fix or remove it")
	case f.CustomModels > 0:
		withAuth(details, MethodAPIKey, "the customModels in ~/.factory/settings.json")
		return v(api.StatusReady, "~/.factory/settings.json has "+itoa(f.CustomModels)+" BYOK custom model(s); only `custom:` models work without a Factory sign-in, so invoke with model `custom:<displayName>-<index>`")
	}
	return v(api.StatusNotConfigured, "Factory Droid is not signed in: "+droidLoginHint)
}

// droidPackage: bin/droid is a Node launcher (or, in an "optimized"
// install, a hard link to the binary itself) that runs the native binary of
// @factory/cli-<platform>-<arch>, or of its -baseline variant for CPUs
// without AVX2. Factory publishes the launcher and the binaries separately
// and their versions differ (launcher 0.225.1 runs binary 0.225.2, which is
// what `droid --version` prints), so the version is the binary package's.
var droidPackage = &npmPackage{Name: "@factory/cli", Platform: func(goos, goarch string) []platformBinary {
	pkg := "@factory/cli-" + nodePlatform[goos] + "-" + nodeArch[goarch]
	return []platformBinary{
		{Package: pkg, Binary: "bin/droid", Version: true},
		{Package: pkg + "-baseline", Binary: "bin/droid", Version: true},
	}
}}

// droidProbe is how detection reads Droid's sign-in, health and version.
var droidProbe = Probe{For: agent.Droid, AuthKind: droidAuthKind, Health: droidHealth, Package: droidPackage}
