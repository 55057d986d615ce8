{-# LANGUAGE DataKinds, KindSignatures, NoImplicitPrelude, ScopedTypeVariables,
             TypeApplications, TypeOperators, FlexibleContexts, NoStarIsType #-}
{-# OPTIONS_GHC -fplugin GHC.TypeLits.Normalise -fplugin GHC.TypeLits.KnownNat.Solver -fplugin GHC.TypeLits.Extra.Solver #-}
{-|
The filter engine's walk through its weight memory ("K2C.Engine"): the ROM
word each step needs, at the ROM's output in that step's cycle.

Word @g * b + t@ of the ROM ("K2C.Memory") is what the PEs need in the
@t@-th step of group @g@, so a window's @S = G * b@ steps read the words in
order, one per cycle. The ROM answers one cycle after its address, so the
address is always one word ahead of the step.

= Hardware

* the ROM: @S@ words of @p * (ch * BitSize w + BitSize bias)@ bits (a block
  RAM, or LUTs when it is shallow), read with an enable;
* the address, a counter @Index S@ of its own, and a flag for the first
  cycle after reset.

= Why the address is a register of its own

The wide ROM's address decoders see no logic before them, and the address's
next value comes from the engine's own registers only, nothing from the
input's handshake: the address is the word after the current one in every
cycle after the first. When idle that is word 1, read speculatively for a
window not yet accepted, so the ROM reads only in steps (and once after
reset, at address 0): an idle ROM holds word 0, which a window's first step
needs, and a window's last step reads word 0 again (the word after the
last). Choosing word 0 or word 1 by the input's accept instead would put the
window generator's handshake before the address and its fan-out (the thesis
CNN on ECP5 at 132 multipliers: 12.7 ns, four LUTs from the window
generator).
-}
module K2C.EngineWeights
  ( stepWeights
  ) where

import Clash.Prelude

import K2C.Memory (Neuron, WeightRom, readWeights)
import K2C.Window (nextIndex)

-- | The ROM word of the current step, given whether this cycle is a step
-- ('K2C.EngineControl.stepping'). Between windows it holds word 0, which the
-- next window's first step needs.
stepWeights
  :: forall dom n p ch w bias
   . ( HiddenClockResetEnable dom
     , KnownNat n, KnownNat p, KnownNat ch, BitPack w, BitPack bias )
  => WeightRom n p ch w bias
  -> Signal dom Bool
  -> Signal dom (Vec p (Neuron ch w bias))
stepWeights weights busy = andEnable (busy .||. firstRead) (readWeights weights ahead)
  where
    ahead     = register (0 :: Index n) (mux busy (nextIndex <$> ahead) (pure (nextIndex 0)))
    firstRead = register True (pure False)
