"""Facts for the base role."""

from __future__ import annotations

from pyinfra.api import FactBase

from roles.base.shapes import SourceEntry  # the fact's shape, importable without pyinfra


def source_entries(lines: list[str]) -> list[SourceEntry]:
    """Parse 'FILE<TAB>LINE' lines of apt source files into entries: one-line format ('deb [opts] URI SUITE
    COMPONENTS...') in *.list and sources.list, deb822 stanzas (URIs:, Suites:, Enabled: no) in *.sources
    (sources.list(5)). deb-src entries, comments and disabled stanzas are skipped."""
    entries: list[SourceEntry] = []
    stanzas: dict[str, list[dict[str, str]]] = {}
    for raw in lines:
        file, _, line = raw.partition("\t")
        line = line.split("#", 1)[0].strip()
        if file.endswith(".sources"):
            stanza = stanzas.setdefault(file, [{}])
            if not line:
                stanza.append({})
            elif ":" in line:
                key, _, value = line.partition(":")
                stanza[-1][key.strip().lower()] = value.strip()
            continue
        words = line.split()
        if words and words[0] == "deb":
            if len(words) > 1 and words[1].startswith("["):  # options: [arch=amd64 signed-by=...]
                while words and not words[1].endswith("]"):
                    words.pop(1)
                words.pop(1)
            if len(words) >= 3:
                entries.append(SourceEntry(file, words[1], words[2]))
    for file, stanza_list in stanzas.items():
        for st in stanza_list:
            if "deb" not in st.get("types", "").split() or st.get("enabled", "yes").lower() == "no":
                continue
            entries += [SourceEntry(file, u, s) for u in st.get("uris", "").split() for s in st.get("suites", "").split()]
    return entries


class AptSourceEntries(FactBase[list[SourceEntry]]):
    """Every enabled apt source entry (source_entries) in /etc/apt/sources.list and /etc/apt/sources.list.d/*.list,
    *.sources; files renamed *.disabled are not read (apt ignores them too)."""

    default = list

    def command(self) -> str:
        return ("for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; "
                "do [ -f \"$f\" ] && awk -v f=\"$f\" '{print f \"\\t\" $0} END {print f \"\\t\"}' \"$f\"; done; true")

    def process(self, output: list[str]) -> list[SourceEntry]:
        return source_entries(output)


class CaBundleStale(FactBase[bool]):
    """True when a v100kit-*.crt under /usr/local/share/ca-certificates is newer than the system CA bundle."""

    def command(self) -> str:
        return ("find /usr/local/share/ca-certificates -name 'v100kit-*.crt' -newer /etc/ssl/certs/ca-certificates.crt"
                " | head -1")

    def process(self, output: list[str]) -> bool:
        return any(line.strip() for line in output)
