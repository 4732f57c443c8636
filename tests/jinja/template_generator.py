"""Random templates for the differential tests: a seeded generator composes
text (spaces, tabs, newlines), output tags, comments, if/for/set, namespaces,
macros, raw and generation blocks, with random whitespace-control markers
("-", "+" or none) on every tag, so that trim_blocks / lstrip_blocks meet
every combination of neighbours. Expressions are typed so that most
templates render; those that fail must fail in both engines.
"""
import random

TEXTS = ["a", "b c", " ", "  ", "\n", "\n  ", "  \n", "x\n\ny", "\t", " z ", "\n\n", "  \t\n ", "é", "\u00a0"]
CONTEXT = {"n": 3, "word": "ab", "xs": [1, 2, 3], "ws": ["p", "q r", " s "], "flag": True, "blank": ""}


class Generator:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.counter = 0
        self.macros = []
        self.callers = []  # macros that wrap caller(): used as `{% call %}` targets

    # ---- pieces
    def fresh(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def marker(self):
        return self.rng.choice(["", "", "", "-", "+"])

    def right_marker(self):
        return self.rng.choice(["", "", "", "-", "+"])

    def tag(self, inner):
        return "{%" + self.marker() + " " + inner + " " + self.right_marker() + "%}"

    def out(self, expr):
        return "{{" + self.rng.choice(["", "", "-", "+"]) + " " + expr + " " + self.rng.choice(["", "", "-"]) + "}}"

    def text(self):
        return "".join(self.rng.choice(TEXTS) for _ in range(self.rng.randint(1, 3)))

    def comment(self):
        return "{#" + self.marker() + self.rng.choice([" c ", "\n", " {{ x }} "]) + self.right_marker() + "#}"

    # ---- expressions, by type
    def names(self, scope, typ):
        return [k for k, v in scope.items() if v == typ]

    def expr(self, scope, typ, depth=0):
        r = self.rng.random()
        names = self.names(scope, typ)
        if depth > 2 or r < 0.35:
            if names and self.rng.random() < 0.6:
                return self.rng.choice(names)
            return self.literal(typ)
        if typ == "int":
            options = [
                lambda: f"{self.expr(scope, 'int', depth + 1)} + {self.expr(scope, 'int', depth + 1)}",
                lambda: f"{self.expr(scope, 'int', depth + 1)} * 2",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|length",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|length",
                lambda: f"({self.expr(scope, 'int', depth + 1)} if {self.expr(scope, 'bool', depth + 1)} else 0)",
                lambda: f"{self.expr(scope, 'int', depth + 1)} {self.rng.choice(['//', '%'])} {self.rng.randint(1, 3)}",
                lambda: f"-{self.expr(scope, 'int', depth + 1)} ** 2",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|{self.rng.choice(['sum', 'max', 'min', 'first', 'last'])}|default(0)",
                lambda: f"({self.expr(scope, 'str', depth + 1)}).find({self.literal('str')})",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|wordcount",
                lambda: f"({self.expr(scope, 'int', depth + 1)} / 2)|round|int",
            ]
            if "loop" in scope:
                options.append(lambda: self.rng.choice(["loop.index", "loop.index0", "loop.revindex", "loop.length"]))
        elif typ == "str":
            options = [
                lambda: f"{self.expr(scope, 'str', depth + 1)} ~ {self.expr(scope, 'int', depth + 1)}",
                lambda: f"{self.expr(scope, 'str', depth + 1)} + {self.expr(scope, 'str', depth + 1)}",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|upper",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|trim",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|join('{self.rng.choice([',', ' ', ''])}')",
                lambda: f"({self.expr(scope, 'str', depth + 1)} if {self.expr(scope, 'bool', depth + 1)} else 'no')",
                lambda: f"({self.expr(scope, 'str', depth + 1)})[1:]",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|tojson",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|{self.rng.choice(['title', 'capitalize', 'lower', 'string', 'e'])}",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|replace({self.literal('str')}, {self.literal('str')})",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|center({self.rng.randint(0, 9)})",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|indent({self.rng.randint(0, 3)}, {self.rng.choice(['true', 'false'])})",
                lambda: f"{self.expr(scope, 'str', depth + 1)}|truncate({self.rng.randint(3, 12)}, {self.rng.choice(['true', 'false'])}, '~', 0)",
                lambda: f"({self.expr(scope, 'str', depth + 1)}).{self.rng.choice(['strip()', 'upper()', 'lstrip()', 'rstrip(' + repr(self.rng.choice(['x', ' ', 'é'])) + ')', 'title()', 'swapcase()'])}",
                lambda: f"({self.expr(scope, 'str', depth + 1)}).split({self.rng.choice(['', repr(' '), repr('q')])})|join('/')",
                lambda: f"({self.expr(scope, 'str', depth + 1)})[{self.rng.choice(['::-1', '-2:', '1::2', ':-1', '5:1:-1'])}]",
                lambda: f"'%s-%d' % ({self.expr(scope, 'str', depth + 1)}, {self.expr(scope, 'int', depth + 1)})",
                lambda: f"'{{}}|{{:>4}}'.format({self.expr(scope, 'str', depth + 1)}, {self.expr(scope, 'int', depth + 1)})",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|map('string')|join({self.literal('str')})",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|sort(reverse={self.rng.choice(['true', 'false'])})|join",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|unique|list|string",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|select('odd')|list|tojson(indent={self.rng.randint(0, 2)})",
                lambda: f"{self.expr(scope, 'int', depth + 1)}|float ~ ''",
                lambda: f"({self.expr(scope, 'int', depth + 1)} / 3) ~ ''",
            ]
            if self.callers:
                options.append(lambda: f"{self.rng.choice(self.callers)}()")
            if self.macros:
                options.append(lambda: f"{self.rng.choice(self.macros)}({self.expr(scope, 'str', depth + 1)})")
            if "ns" in scope:
                options.append(lambda: "ns.c ~ ''")
        elif typ == "bool":
            options = [
                lambda: f"{self.expr(scope, 'int', depth + 1)} > {self.expr(scope, 'int', depth + 1)}",
                lambda: f"{self.expr(scope, 'str', depth + 1)} == {self.expr(scope, 'str', depth + 1)}",
                lambda: f"not {self.expr(scope, 'bool', depth + 1)}",
                lambda: f"{self.expr(scope, 'bool', depth + 1)} and {self.expr(scope, 'bool', depth + 1)}",
                lambda: f"{self.expr(scope, 'int', depth + 1)} is odd",
                lambda: f"{self.rng.choice(['undefined_x', 'n', 'word'])} is defined",
                lambda: f"{self.expr(scope, 'str', depth + 1)} in {self.expr(scope, 'str', depth + 1)}",
                lambda: f"{self.expr(scope, 'int', depth + 1)} not in {self.expr(scope, 'list', depth + 1)}",
                lambda: f"{self.expr(scope, 'str', depth + 1)} < {self.expr(scope, 'str', depth + 1)}",
                lambda: f"({self.expr(scope, 'str', depth + 1)}).startswith({self.literal('str')})",
                lambda: f"{self.expr(scope, 'list', depth + 1)} is sequence",
            ]
            if "loop" in scope:
                options.append(lambda: self.rng.choice(["loop.first", "loop.last"]))
        else:  # list
            options = [
                lambda: f"{self.expr(scope, 'list', depth + 1)}|reverse|list",
                lambda: f"[{self.expr(scope, 'int', depth + 1)}, {self.expr(scope, 'int', depth + 1)}]",
                lambda: f"{self.expr(scope, 'list', depth + 1)} + [{self.expr(scope, 'int', depth + 1)}]",
                lambda: f"({self.expr(scope, 'list', depth + 1)})[{self.rng.choice(['::-1', '1:', ':2', '-1:'])}]",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|reject('even')|list",
                lambda: f"{self.expr(scope, 'list', depth + 1)}|batch(2)|map('sum')|list",
            ]
        return self.rng.choice(options)()

    def literal(self, typ):
        if typ == "int":
            return str(self.rng.randint(0, 5))
        if typ == "str":
            return self.rng.choice(["'x'", "' y '", "\"q\"", "''", "'\\n'", "'é'"])
        if typ == "bool":
            return self.rng.choice(["true", "false", "flag"])
        return self.rng.choice(["xs", "[1, 2]", "[]", "ws|map('length')|list"])

    # ---- statements
    def body(self, depth, scope):
        parts = []
        for _ in range(self.rng.randint(1, 4)):
            r = self.rng.random()
            if r < 0.3:
                parts.append(self.text())
            elif r < 0.5:
                parts.append(self.out(self.expr(scope, self.rng.choice(["int", "str", "str"]))))
            elif r < 0.56:
                parts.append(self.comment())
            elif depth < 3 and r < 0.7:
                parts.append(self.if_stmt(depth, scope))
            elif depth < 3 and r < 0.84:
                parts.append(self.for_stmt(depth, scope))
            elif r < 0.9:
                parts.append(self.set_stmt(scope))
            elif r < 0.94:
                parts.append(self.tag("generation") + self.body(depth + 1, dict(scope)) + self.tag("endgeneration"))
            elif r < 0.96:
                parts.append(self.tag("raw") + self.rng.choice(["{{ raw }}", " {% x %} ", "\n"]) + self.tag("endraw"))
            else:
                parts.append(self.text())
        return "".join(parts)

    def if_stmt(self, depth, scope):
        s = self.tag("if " + self.expr(scope, "bool")) + self.body(depth + 1, dict(scope))
        if self.rng.random() < 0.3:
            s += self.tag("elif " + self.expr(scope, "bool")) + self.body(depth + 1, dict(scope))
        if self.rng.random() < 0.5:
            s += self.tag("else") + self.body(depth + 1, dict(scope))
        return s + self.tag("endif")

    def for_stmt(self, depth, scope):
        var = self.fresh("v")
        source, elem = self.rng.choice([("xs", "int"), ("ws", "str"), ("range(2)", "int"), ("word", "str")])
        inner = dict(scope)
        inner[var] = elem
        inner["loop"] = "loop"
        head = f"for {var} in {source}"
        if self.rng.random() < 0.2:
            head += f" if {var} != {self.literal(elem)}"
        s = self.tag(head) + self.body(depth + 1, inner)
        if "ns" in scope and self.rng.random() < 0.5:
            s += self.tag("set ns.c = ns.c + 1")
        if self.rng.random() < 0.15:
            s += self.tag("if loop.index > 1") + self.tag(self.rng.choice(["break", "continue"])) + self.tag("endif")
        if self.rng.random() < 0.2:
            s += self.tag("else") + self.body(depth + 1, dict(scope))
        return s + self.tag("endfor")

    def set_stmt(self, scope):
        typ = self.rng.choice(["int", "str", "list"])
        name = self.fresh("s")
        value = self.expr(scope, typ)
        scope[name] = typ
        if self.rng.random() < 0.2:
            scope[name] = "str"
            return self.tag(f"set {name}") + self.text() + self.out(value) + self.tag("endset")
        return self.tag(f"set {name} = {value}")

    def template(self):
        scope = {"n": "int", "word": "str", "xs": "list", "ws": "list", "flag": "bool", "blank": "str"}
        prelude = ""
        if self.rng.random() < 0.4:
            prelude += self.tag("set ns = namespace(c=0)") + self.text()
            scope["ns"] = "ns"
        if self.rng.random() < 0.3:
            name = self.fresh("m")
            macro_scope = dict(scope, a="str")
            prelude += self.tag(f"macro {name}(a, b='d')") + self.body(2, macro_scope) + self.tag("endmacro")
            self.macros.append(name)
        if self.rng.random() < 0.2:
            name = self.fresh("w")
            prelude += self.tag(f"macro {name}()") + self.text() + "{{ caller() }}" + self.text() + self.tag("endmacro")
            prelude += self.tag(f"call {name}()") + self.body(2, dict(scope)) + self.tag("endcall")
        body = prelude + self.body(0, scope)
        if "ns" in scope:
            body += self.out("ns.c")
        return body + self.rng.choice(["", "\n", " ", "\n\n"])


def random_templates(count, seed=1234):
    return [Generator(seed * 100003 + i).template() for i in range(count)]


# Every combination of markers on a block, a comment and an output tag between
# texts that exercise trim_blocks and lstrip_blocks.
def whitespace_templates():
    texts = ["", " ", "  \n", "\n  ", "a  \n  ", "\n\n", " \t ", "x\n"]
    out = []
    rng = random.Random(7)
    for left in ["", "-", "+"]:
        for right in ["", "-", "+"]:
            for kind in ["block", "comment", "var", "raw"]:
                for _ in range(4):
                    t1, t2, t3 = (rng.choice(texts) for _ in range(3))
                    if kind == "block":
                        tpl = f"{t1}{{%{left} if true {right}%}}{t2}{{%{left} endif {right}%}}{t3}"
                    elif kind == "comment":
                        tpl = f"{t1}{{#{left} c {right}#}}{t2}{{#{left}#}}{t3}"
                    elif kind == "var":
                        r = "" if right == "+" else right
                        tpl = f"{t1}{{{{{left} 'v' {r}}}}}{t2}{{{{{left} 'w' }}}}{t3}"
                    else:
                        tpl = f"{t1}{{%{left} raw {right if right != '+' else ''}%}}{t2}{{%{left} endraw {right}%}}{t3}"
                    out.append(tpl)
    return out
