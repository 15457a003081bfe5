#!/usr/bin/env python3
# Holds N idle connections to a node from 127.0.0.2, then times 20 /health
# and 20 one-message pushes from 127.0.0.1 (issue 21: one address holding
# idle sockets used to lock every client out). Usage: conn-flood.py PORT N
import socket, sys, time, urllib.request, json
port=int(sys.argv[1]); n=int(sys.argv[2])
socks=[]
for i in range(n):
    s=socket.socket(); s.bind(("127.0.0.2",0))
    try:
        s.connect(("127.0.0.1",port)); socks.append(s)
    except Exception as e:
        print("connect err",e); break
time.sleep(1)
def timed(req):
    t=time.time()
    try:
        r=urllib.request.urlopen(req,timeout=10); code=r.status; r.read()
    except urllib.error.HTTPError as e: code=e.code
    except Exception as e: code=str(e)
    return code, round((time.time()-t)*1000,1)
base="http://127.0.0.1:%d"%port
res=[]
for i in range(20):
    res.append(("health",)+timed(base+"/health"))
    res.append(("push",)+timed(urllib.request.Request(base+"/api/v1/push",data=json.dumps({"items":[{"queue":"fl","payload":{"i":i}}]}).encode(),headers={"Content-Type":"application/json"})))
codes={}
for k,c,ms in res: codes.setdefault((k,c),[]).append(ms)
for k,v in codes.items(): print(k, "n=",len(v), "max_ms=",max(v), "median_ms=",sorted(v)[len(v)//2])
st=json.load(urllib.request.urlopen(base+"/status"))
print({k:v for k,v in st.get("http",{}).items()})
