#!/usr/bin/env python3
"""gen_jinja_golden.py — writes jinja_golden.json: small templates × contexts
rendered by Python's jinja2 in transformers' environment (see
tests/integration/test_chat_template_conformance.py: trim_blocks,
lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)), for
tests/unit/test_jinja.c. A case whose rendering raises records
"error": true (and "message" for raise_exception).

    ~/.cache/inferd/venv/bin/python tests/data/jinja/gen_jinja_golden.py
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "integration"))
from test_chat_template_conformance import hf_env  # noqa: E402

import jinja2  # noqa: E402

MSGS = [{"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "Héllo wörld"},
        {"role": "assistant", "content": "Hi!", "tool_calls": [
            {"function": {"name": "f", "arguments": {"a": 1, "b": [True, None, 2.5]}}}]}]
CTX = {"messages": MSGS, "n": 7, "x": 2.5, "s": "a,b,,c", "u": "日本語テキスト",
       "d": {"b": 2, "a": 1, "C": 3}, "l": [3, 1, 2], "e": "", "nested": {"k": {"v": "deep"}},
       "tools": None, "flag": False, "big": 1e16, "small": 1e-05, "neg": -0.0}

CASES = [
    # whitespace control as HF configures it
    "a\n  {% if true %}\n    b\n  {% endif %}\nc",
    "a  {%- if true -%}  b  {%- endif -%}  c",
    "x {{ 1 }}\n{% if true %}y{% endif %}\nz\n",
    "{%+ if true %}  keep{% endif +%}\nnext",
    "a {# comment #}\n  {# own line #}\nb",
    "{{- '  t  ' -}}\n\n{{ 'u' }}",
    "line1\r\nline2 {{ 'v' }}\r\n",
    "{% raw %}{{ not rendered }}{% endraw %}",
    # string-literal escapes, decoded as Python's unicode-escape does
    r"""{{ '\x41\u00e9\U0001F600\101\7|\q\'\"\\|\a\b\f\v\r\t|' }}{{ "x\
y" }}""",
    # expressions
    "{{ 1 + 2 * 3 - 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }}",
    "{{ x * 2 }} {{ n / 2 }} {{ big }} {{ small }} {{ neg }} {{ 0.1 + 0.2 }} {{ 1e300 * 10 }}",
    "{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1, 2] + [3] }} {{ 'x' + 'y' }}",
    "{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in l }} {{ 'a' in d }} {{ l == [3, 1, 2] }}",
    "{{ n if n > 5 else 'small' }} {{ 'yes' if e else 'no' }} {{ (e or 'default') }} {{ 0 and 1 }}",
    "{{ not flag }} {{ none is none }} {{ n is number }} {{ s is string }} {{ d is mapping }}",
    "{{ l is iterable }} {{ s is sequence }} {{ undefined_var is defined }} {{ x is float }}",
    "{{ n is divisibleby 7 }} {{ n is odd }} {{ flag is false }} {{ 1 is true }} {{ n is eq 7 }}",
    "{{ s[0] }}{{ s[-1] }} {{ s[1:4] }} {{ s[::-1] }} {{ u[::-1] }} {{ u[1:3] }} {{ l[::2] }}",
    "{{ u | length }} {{ u[2] }} {{ l[-1] }} {{ l[10] is defined }} {{ d['a'] }} {{ d.b }}",
    "{{ nested.k.v }} {{ nested['k']['v'] }} {{ nested.missing is defined }}",
    "{{ [1, 'a', none, true, 2.0] }} {{ d }} {{ ('t',) }} {{ {'q': \"it's\"} }}",
    # filters
    "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'ABC' | lower }}",
    "{{ 'hello' | upper }} {{ 'hELLO wORLD' | capitalize }} {{ l | length }} {{ d | count }}",
    "{{ l | join(', ') }} {{ l | first }} {{ l | last }} {{ l | sort | list }} {{ l | max }}",
    "{{ undefined_var | default('dflt') }} {{ e | default('dflt', true) }} {{ e | default('x') }}",
    "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %} {% for k, v in d | dictsort %}{{ k }}{% endfor %}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }}",
    "{{ messages | rejectattr('role', 'equalto', 'system') | list | length }}",
    "{{ messages | map(attribute='role') | list }} {{ l | map('string') | join('-') }}",
    "{{ 'a-b-c' | replace('-', '+') }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }}",
    "{{ d | tojson }} {{ messages[2].tool_calls[0].function.arguments | tojson }}",
    "{{ d | tojson(indent=2) }}\n{{ l | tojson(indent=4) }}\n{{ {} | tojson(indent=2) }}",
    "{{ d | tojson(sort_keys=true) }} {{ u | tojson }} {{ 'q\"\\\\\\n\\t' | tojson }}",
    "{{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'a\\nb' | indent(3, true) }}",
    "{{ 'Hello' | safe + '<b>' }} {{ '<i>' | safe }} {{ 'x' ~ '<' | safe }}",
    "{{ l | unique | list }} {{ [1, 1, 2] | unique | list }} {{ l | reverse | list }} {{ l | sum }}",
    "{{ messages | selectattr('tool_calls', 'defined') | list | length }}",
    "{{ l | select('odd') | list }} {{ l | reject('odd') | list }} {{ 'a b  c' | wordcount }}",
    "{{ none | selectattr('x') | list }} {{ tools | map('upper') | list }}",
    # methods
    "{{ s.split(',') }} {{ s.split(',', 1) }} {{ '  a  b '.split() }} {{ 'a b c'.rsplit(' ', 1) }}",
    "{{ '  x '.strip() }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ 'xxyxx'.strip('x') }}",
    "{{ s.startswith('a,') }} {{ s.endswith(('z', 'c')) }} {{ s.replace(',', ';', 2) }}",
    "{{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ 'hi {} {}'.format(1, 'x') }}",
    "{{ d.get('a') }} {{ d.get('zz', 'none') }} {{ d.get('zz') }} {{ d.keys() | list }} {{ d.values() | list }}",
    "{{ s.find('b') }} {{ s.count(',') }} {{ '12'.isdigit() }} {{ 'x'.join(['1', '2']) }}",
    # statements
    "{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ loop.first }}{{ loop.last }}"
    "{{ loop.revindex }}{{ loop.index0 }} {% endfor %}",
    "{% for i in range(3) %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}",
    "{% for x in [] %}no{% else %}empty{% endfor %} {% for i in range(10) %}{% if i > 3 %}"
    "{% break %}{% endif %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "{% for i in range(5) if i is odd %}{{ i }}{{ loop.length }} {% endfor %}",
    "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{% endfor %}",
    "{% set ns = namespace(c=0, found=false) %}{% for m in messages %}{% set ns.c = ns.c + 1 %}"
    "{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.c }} {{ ns.found }}",
    "{% set x = 1 %}{% for i in range(2) %}{% set x = x + 10 %}{{ x }} {% endfor %}{{ x }}",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }} {% set t = 1, 2 %}{{ t }}",
    "{% set block %}inner {{ n }}{% endset %}[{{ block }}] {% set up | upper %}shout{% endset %}{{ up }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} "
    "{{ greet('Al', punct='?') }} {{ greet(name='Cy') }}",
    "{% macro rec(k) %}{{ k }}{% if k > 0 %}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}",
    "{% filter upper %}abc {{ 'def' }}{% endfilter %}",
    "{% if n > 10 %}big{% elif n > 5 %}mid{% elif n > 1 %}low{% else %}tiny{% endif %}",
    "{% generation %}gen {{ n }}{% endgeneration %}",
    "{{ strftime_now('%Y-%m-%d') | length }}",
    "{% for c in 'héllo' %}{{ c }}.{% endfor %} {% for k in d %}{{ k }}{% endfor %}",
    "{{ messages[0]['content'] | trim }}|{{ messages[1].content[:3] }}|{{ messages[-1].role }}",
    "{% if messages[0].role == 'system' %}{% set rest = messages[1:] %}{% else %}{% set rest = messages %}"
    "{% endif %}{{ rest | length }}",
    # errors (Python raises)
    "{{ raise_exception('Conversation roles must alternate') }}",
    "{{ undefined_var.attr }}",
    "{{ 1 + 'a' }}",
    "{{ l | tojson }}{{ undefined_var | tojson }}",
    "{{ range(200000) | length }}",
    "{{ 1 / 0 }}",
    "{{ messages | map(attribute='role') | tojson }}",
    "{% set ns = namespace() %}{% set d.x = 1 %}",
    "{{ d.items() | length }}{{ l.append(1) }}",
]


def main():
    env = hf_env()
    out = []
    for src in CASES:
        c = {"template": src}
        try:
            c["expected"] = env.from_string(src).render(**CTX)
        except jinja2.TemplateError as e:
            c["error"] = True
            if type(e) is jinja2.TemplateError:
                c["message"] = str(e)
        except Exception:  # noqa: BLE001 — TypeError etc. from the template's code
            c["error"] = True
        out.append(c)
    doc = {"about": "rendered by Python jinja2 %s in transformers' environment; produced by "
                    "gen_jinja_golden.py" % jinja2.__version__,
           "context": CTX, "cases": out}
    with open(os.path.join(here, "jinja_golden.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases")


if __name__ == "__main__":
    main()
